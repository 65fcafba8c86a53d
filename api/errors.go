package api

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/paygate/paygate/apperr"
)

// Error codes of SPEC.md "Errors".
const (
	CodeBadRequest   = "BAD_REQUEST"
	CodeUnauthorized = "UNAUTHORIZED"
	CodeForbidden    = "FORBIDDEN"
	CodeNotFound     = "NOT_FOUND"
	CodeConflict     = "CONFLICT"
	CodeRateLimited  = "RATE_LIMITED"
	CodeInternal     = "INTERNAL_ERROR"
	CodeTimeout      = "TIMEOUT"
	// CodeUnavailable: the workers did not answer a workflow Update (submit,
	// wallet progress, cancel) in time; retry after Retry-After.
	CodeUnavailable = "SERVICE_UNAVAILABLE"
	// CodeMethodNotAllowed: the path is a route, not with this method (a
	// 405 with the route's methods in Allow). SPEC.md's table has no code
	// for it, and BAD_REQUEST's messages are "field: reason".
	CodeMethodNotAllowed = "METHOD_NOT_ALLOWED"
)

// mapping is the one table from domain error kinds to HTTP.
var mapping = []struct {
	kind   error
	status int
	code   string
}{
	{apperr.ErrBadRequest, http.StatusBadRequest, CodeBadRequest},
	{apperr.ErrUnauthorized, http.StatusUnauthorized, CodeUnauthorized},
	{apperr.ErrForbidden, http.StatusForbidden, CodeForbidden},
	{apperr.ErrNotFound, http.StatusNotFound, CodeNotFound},
	{apperr.ErrConflict, http.StatusConflict, CodeConflict},
	{apperr.ErrTimeout, http.StatusGatewayTimeout, CodeTimeout},
	{apperr.ErrUnavailable, http.StatusServiceUnavailable, CodeUnavailable},
	{apperr.ErrRateLimited, http.StatusTooManyRequests, CodeRateLimited},
}

// defaultRetryAfter is the Retry-After of a 503 whose error names none.
const defaultRetryAfter = 5 * time.Second

// ErrorStatus maps an error to its HTTP status and code (exported for tests
// and for the OpenAPI document's error table).
func ErrorStatus(err error) (int, string) {
	for _, m := range mapping {
		if errors.Is(err, m.kind) {
			return m.status, m.code
		}
	}
	return http.StatusInternalServerError, CodeInternal
}

// fail writes err in the error envelope and stops the chain. Anything that
// is not a domain error is logged and shown only as an internal error.
func fail(c *gin.Context, err error) {
	status, code := ErrorStatus(err)
	body := errorBody{Status: "error", Code: code, Message: err.Error()}
	var de *apperr.Error
	if errors.As(err, &de) {
		body.Hint = de.Hint
	}
	switch status {
	case http.StatusInternalServerError:
		slog.ErrorContext(c.Request.Context(), "request failed", "err", err, "requestId", requestID(c),
			"method", c.Request.Method, "route", c.FullPath())
		body.Message = "internal error; retry in 1 to 2 seconds"
	case http.StatusGatewayTimeout:
		body.Hint = "retry in 2 to 5 seconds"
	case http.StatusServiceUnavailable:
		wait := defaultRetryAfter
		if de != nil && de.RetryAfter != 0 {
			wait = de.RetryAfter
		}
		if wait > 0 {
			c.Header("Retry-After", strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10))
		}
	case http.StatusTooManyRequests:
		// SPEC.md's 429: retryAfter in the body, and the header.
		secs := int64(1)
		if de != nil && de.RetryAfter > 0 {
			secs = int64((de.RetryAfter + time.Second - 1) / time.Second)
		}
		c.Header("Retry-After", strconv.FormatInt(secs, 10))
		body.RetryAfter = &secs
	}
	c.AbortWithStatusJSON(status, body)
}
