// Package apperr defines the domain errors every layer returns. The API maps
// them to SPEC.md's codes in exactly one place (api/errors.go); nothing ever
// matches an error by its text.
package apperr

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// Sentinel kinds. Wrap them with New so the user-facing message travels with
// the kind: errors.Is(err, ErrNotFound) still holds.
var (
	ErrNotFound     = errors.New("not found")
	ErrConflict     = errors.New("conflict")
	ErrForbidden    = errors.New("forbidden")
	ErrUnauthorized = errors.New("unauthorized")
	ErrTimeout      = errors.New("timeout")
	ErrBadRequest   = errors.New("bad request")
	// ErrUnavailable: a dependency (the workers behind a workflow Update)
	// did not answer in time; the request may be retried.
	ErrUnavailable = errors.New("service unavailable")
	// ErrRateLimited: the caller did this too often (a count the service
	// keeps, not the request limiter's); retry after RetryAfter.
	ErrRateLimited = errors.New("rate limited")
)

// Error is a domain error: a kind (one of the sentinels), a message safe to
// show to end users, and an optional hint.
type Error struct {
	Kind    error
	Message string
	Hint    string
	// RetryAfter, when positive, is how long the caller should wait before
	// retrying (the Retry-After header of a 503).
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Message }

// Unwrap lets errors.Is match the kind.
func (e *Error) Unwrap() error { return e.Kind }

// New builds a domain error of the given kind.
func New(kind error, message string) error { return &Error{Kind: kind, Message: message} }

// WithHint builds a domain error carrying a hint.
func WithHint(kind error, message, hint string) error {
	return &Error{Kind: kind, Message: message, Hint: hint}
}

// NotFound is the one answer for a resource that is absent, deleted, of
// another merchant or of the other mode: callers cannot tell them apart.
func NotFound() error { return &Error{Kind: ErrNotFound, Message: "not found"} }

// Unavailable builds a 503 error: the request could not be completed now
// and may be retried after retryAfter (NoRetry: retrying will not help,
// and no Retry-After is sent).
func Unavailable(message string, retryAfter time.Duration) error {
	if retryAfter <= 0 {
		return &Error{Kind: ErrUnavailable, Message: message, RetryAfter: NoRetry}
	}
	secs := int64((retryAfter + time.Second - 1) / time.Second)
	return &Error{Kind: ErrUnavailable, Message: message, RetryAfter: retryAfter,
		Hint: "retry in " + strconv.FormatInt(secs, 10) + " seconds"}
}

// TooMany builds a 429 error: the caller may do it again after retryAfter
// (at least a second).
func TooMany(message string, retryAfter time.Duration) error {
	if retryAfter < time.Second {
		retryAfter = time.Second
	}
	return &Error{Kind: ErrRateLimited, Message: message, RetryAfter: retryAfter}
}

// NoRetry as an Error's RetryAfter: a 503 that retrying will not mend (a
// feature this server is not set up for).
const NoRetry time.Duration = -1

// Conflict builds a 409 error.
func Conflict(message string) error { return &Error{Kind: ErrConflict, Message: message} }

// Forbidden builds a 403 error.
func Forbidden(message string) error { return &Error{Kind: ErrForbidden, Message: message} }

// FieldError is one `field: reason` pair of a validation failure.
type FieldError struct {
	Field  string
	Reason string
}

// ValidationError collects every problem of one request, so the caller sees
// all of them at once. Its message is `field: reason; field: reason`.
type ValidationError struct {
	Fields []FieldError
}

// Add records a problem with a field.
func (v *ValidationError) Add(field, reason string) {
	v.Fields = append(v.Fields, FieldError{Field: field, Reason: reason})
}

// Has reports whether a problem was already recorded for field.
func (v *ValidationError) Has(field string) bool {
	for _, f := range v.Fields {
		if f.Field == field {
			return true
		}
	}
	return false
}

// Err returns nil when nothing was recorded, the error otherwise.
func (v *ValidationError) Err() error {
	if v == nil || len(v.Fields) == 0 {
		return nil
	}
	return v
}

func (v *ValidationError) Error() string {
	parts := make([]string, len(v.Fields))
	for i, f := range v.Fields {
		parts[i] = f.Field + ": " + f.Reason
	}
	return strings.Join(parts, "; ")
}

// Unwrap makes errors.Is(err, ErrBadRequest) true for validation errors.
func (v *ValidationError) Unwrap() error { return ErrBadRequest }

// Invalid builds a validation error for a single field.
func Invalid(field, reason string) error {
	return &ValidationError{Fields: []FieldError{{Field: field, Reason: reason}}}
}
