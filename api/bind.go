package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/paygate/paygate/apperr"
)

// maxBody bounds every request body.
const maxBody = 1 << 20

// bindJSON decodes the request body into dst strictly: one JSON object, no
// unknown fields, member names in their exact case and none twice in an
// object (checkKeys), no trailing data, at most 1 MiB. Every failure is a 400
// whose message names the field.
func bindJSON(c *gin.Context, dst any) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	return decodeBody(body, dst)
}

// bindOptionalJSON is bindJSON for a route whose body may be left out: no
// body (or one of white space only) leaves dst as it is.
func bindOptionalJSON(c *gin.Context, dst any) error {
	body, err := readBody(c)
	if err != nil || len(bytes.TrimSpace(body)) == 0 {
		return err
	}
	return decodeBody(body, dst)
}

func readBody(c *gin.Context) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, apperr.Invalid("body", "must be at most 1 MiB")
		}
		return nil, apperr.Invalid("body", "could not be read")
	}
	return body, nil
}

func decodeBody(body []byte, dst any) error {
	// An object, not null: encoding/json decodes null into a struct as
	// nothing at all, which a route whose fields are all optional would
	// take for {}.
	if trimmed := bytes.TrimSpace(body); len(trimmed) == 0 || trimmed[0] != '{' {
		return apperr.Invalid("body", "must be a JSON object")
	}
	if err := checkKeys(body, reflect.TypeOf(dst)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	if dec.More() {
		return apperr.Invalid("body", "must hold exactly one JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return apperr.Invalid("body", "must hold exactly one JSON object")
	}
	return nil
}

func decodeError(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return apperr.Invalid("body", fmt.Sprintf("malformed JSON at offset %d", syntax.Offset))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return apperr.Invalid("body", "malformed JSON (unexpected end)")
	case errors.As(err, &typ):
		if typ.Field == "" {
			return apperr.Invalid("body", "must be a JSON object")
		}
		// The path may hold a map's key, from the request.
		field := ""
		for _, part := range strings.Split(typ.Field, ".") {
			field = memberPath(field, part)
		}
		return apperr.Invalid(field, "must be "+jsonKind(typ.Type.Kind().String()))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		// encoding/json has no typed error for unknown fields; its message
		// format is part of the package's documented behaviour.
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return apperr.Invalid(memberPath("", name), "is not a known field")
	}
	return apperr.Invalid("body", "is not valid JSON for this request")
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "int", "int64", "int32", "uint", "uint64":
		return "an integer"
	case "slice", "array":
		return "an array"
	case "map", "struct":
		return "an object"
	}
	return "of another type"
}
