// Package logging builds the service's structured JSON logger: every line
// of an HTTP request carries its request id (taken from the context), and
// credentials never reach the output. API keys (svc_test_sk_..., svc_live_sk_...),
// dashboard session tokens (svc_sess_...) and webhook secrets (whsec_...) are
// masked wherever they appear (message, attribute values, errors, groups),
// and attributes named like a secret (password, token, secret, authorization,
// ...) are dropped to "[REDACTED]" whatever their value.
//
// The redaction is defense in depth: handlers should not log credentials in
// the first place.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
)

// RequestIDKey is the attribute name of the request id on every log line.
const RequestIDKey = "requestId"

// Redacted replaces a masked secret.
const Redacted = "[REDACTED]"

type ctxKey struct{}

// WithRequestID returns ctx carrying the request id id; log calls made with
// that context (InfoContext, ErrorContext, ...) get a requestId attribute.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// RequestID returns the request id ctx carries, or "".
func RequestID(ctx context.Context) string {
	if ctx == nil {
		return ""
	}
	id, _ := ctx.Value(ctxKey{}).(string)
	return id
}

// secretPattern matches the credential formats the service issues: API keys,
// dashboard sessions and webhook endpoint secrets, with whatever follows the
// prefix up to a character that cannot be part of the token.
var secretPattern = regexp.MustCompile(`(svc_(?:test|live)_sk_|svc_sess_|whsec_)[A-Za-z0-9_\-+/=.]*`)

// secretKeys are attribute names whose value is always masked (compared
// case-insensitively, ignoring '_' and '-').
var secretKeys = []string{"password", "passwd", "secret", "token", "authorization", "apikey", "fullkey", "cookie", "sessiontoken", "webhooksecret", "privatekey", "secretkey"}

// masks name the kind of credential a mask replaced, without its prefix, so
// that a search of the logs for a prefix finds nothing.
var masks = map[string]string{
	"svc_test_sk_": "[REDACTED_TEST_KEY]",
	"svc_live_sk_": "[REDACTED_LIVE_KEY]",
	"svc_sess_":    "[REDACTED_SESSION]",
	"whsec_":       "[REDACTED_WEBHOOK_SECRET]",
}

// Scrub masks every credential in s, prefix included, with a marker naming
// its kind ("[REDACTED_TEST_KEY]").
func Scrub(s string) string {
	if !strings.Contains(s, "svc_") && !strings.Contains(s, "whsec_") {
		return s
	}
	return secretPattern.ReplaceAllStringFunc(s, func(m string) string {
		for prefix, mask := range masks {
			if strings.HasPrefix(m, prefix) {
				return mask
			}
		}
		return Redacted
	})
}

// secretKey reports whether an attribute of that name holds a secret.
func secretKey(name string) bool {
	n := strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(name))
	for _, k := range secretKeys {
		if n == k || strings.HasSuffix(n, k) {
			return true
		}
	}
	return false
}

// RedactAttr masks a single attribute: by name for secret-looking keys, by
// content for every string, error, Stringer or other value (formatted first).
// Groups are walked. It fits slog.HandlerOptions.ReplaceAttr as well.
func RedactAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		attrs := v.Group()
		out := make([]slog.Attr, len(attrs))
		for i, g := range attrs {
			out[i] = RedactAttr(g)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(out...)}
	}
	if secretKey(a.Key) {
		return slog.String(a.Key, Redacted)
	}
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, Scrub(v.String()))
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.String(a.Key, Scrub(x.Error()))
		case fmt.Stringer:
			return slog.String(a.Key, Scrub(x.String()))
		case []byte:
			return slog.String(a.Key, Scrub(string(x)))
		case nil:
			return a
		default:
			// Structs and maps are checked in their formatted form; one
			// holding a credential is logged as that masked text, so the
			// secret cannot slip through the JSON encoder.
			if s := fmt.Sprintf("%+v", x); Scrub(s) != s {
				return slog.String(a.Key, Scrub(s))
			}
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// Handler wraps another slog.Handler: it adds the context's request id and
// masks credentials before the record reaches the wrapped handler.
type Handler struct {
	next slog.Handler
	// hasRequestID is true when WithAttrs already attached a request id.
	hasRequestID bool
}

// NewHandler wraps next with request ids and redaction.
func NewHandler(next slog.Handler) *Handler { return &Handler{next: next} }

// NewJSON returns the service's logger: JSON lines to w at level, with
// request ids and redaction.
func NewJSON(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(NewHandler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})))
}

// Enabled reports whether the wrapped handler logs at level.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle masks the record's message and attributes and adds the request id
// of ctx unless the record (or a WithAttrs) names one already.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, Scrub(r.Message), r.PC)
	has := h.hasRequestID
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == RequestIDKey {
			has = true
		}
		out.AddAttrs(RedactAttr(a))
		return true
	})
	if !has {
		if id := RequestID(ctx); id != "" {
			out.AddAttrs(slog.String(RequestIDKey, id))
		}
	}
	return h.next.Handle(ctx, out)
}

// WithAttrs masks attrs and passes them on.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(attrs))
	has := h.hasRequestID
	for i, a := range attrs {
		if a.Key == RequestIDKey {
			has = true
		}
		out[i] = RedactAttr(a)
	}
	return &Handler{next: h.next.WithAttrs(out), hasRequestID: has}
}

// WithGroup passes the group on.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), hasRequestID: h.hasRequestID}
}
