package api

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
)

// Response bodies follow SPEC.md's envelope: status "success" with data (and
// hasMore for cursor lists) or message; status "error" with message and code.

type itemBody struct {
	Status string `json:"status"`
	Data   any    `json:"data"`
}

type listBody struct {
	Status  string `json:"status"`
	Data    any    `json:"data"`
	HasMore bool   `json:"hasMore"`
}

type messageBody struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

type errorBody struct {
	Status  string `json:"status"`
	Message string `json:"message"`
	Code    string `json:"code"`
	Hint    string `json:"hint,omitempty"`
	// RetryAfter is a 429's wait in seconds (SPEC.md).
	RetryAfter *int64 `json:"retryAfter,omitempty"`
}

func respond(c *gin.Context, status int, data any) {
	c.JSON(status, itemBody{Status: "success", Data: data})
}

func respondList(c *gin.Context, data any, hasMore bool) {
	c.JSON(http.StatusOK, listBody{Status: "success", Data: data, HasMore: hasMore})
}

// respondArray answers a list without pagination (SPEC.md lists such as
// payment links and settlements have no hasMore).
func respondArray(c *gin.Context, data any) {
	c.JSON(http.StatusOK, itemBody{Status: "success", Data: data})
}

func respondMessage(c *gin.Context, status int, message string) {
	c.JSON(status, messageBody{Status: "success", Message: message})
}

// Time is a timestamp as the API prints it: UTC ISO 8601 with milliseconds.
type Time time.Time

// MarshalJSON prints 2026-11-22T10:04:05.123Z.
func (t Time) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Time(t).UTC().Format("2006-01-02T15:04:05.000Z") + `"`), nil
}

func ts(t time.Time) Time { return Time(t) }

func tsPtr(t *time.Time) *Time {
	if t == nil {
		return nil
	}
	v := Time(*t)
	return &v
}

func unixTime(sec int64) time.Time { return time.Unix(sec, 0).UTC() }

// nonNil is list, or an empty one for nil: a JSON array, never null.
func nonNil[T any](list []T) []T {
	if list == nil {
		return []T{}
	}
	return list
}
