package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/paygate/paygate/apperr"
)

// checkKeys refuses what encoding/json would take silently in a request
// body decoded into a value of type t: a member name in another case than
// the field's ({"Amount": …} for amount: encoding/json matches names
// case-insensitively, so {"amount":"1","AMOUNT":"9"} decoded as 9), and a
// name that appears twice in one object (the last one won). Either lets a
// body mean something else to a proxy, a log or a signature check than to
// the handler. Malformed JSON is left to the decoder, whose messages say
// where; the body is known to start with an object.
func checkKeys(body []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := walkKeys(dec, t, "", 0); err != nil && !errors.Is(err, errMalformed) {
		return err
	}
	return nil
}

// errMalformed stops the walk at JSON the decoder will refuse itself.
var errMalformed = errors.New("malformed JSON")

// maxBodyDepth bounds the nesting of a request body: no request type
// nests half as deep, and a megabyte of brackets is refused at once.
const maxBodyDepth = 32

// walkKeys reads one value of type t (nil: any) at depth and checks its
// objects' member names; path names it in an error ("" at the root).
func walkKeys(dec *json.Decoder, t reflect.Type, path string, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		return errMalformed
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar
	}
	if depth >= maxBodyDepth {
		return apperr.Invalid("body", fmt.Sprintf("must not nest more than %d levels", maxBodyDepth))
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && (reflect.PointerTo(t).Implements(unmarshalerType) || t.Implements(unmarshalerType)) {
		t = nil // a type that reads its own JSON: only duplicate names are checked
	}
	switch d {
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for dec.More() {
			if err := walkKeys(dec, elem, path, depth+1); err != nil {
				return err
			}
		}
	case '{':
		var fields map[string]reflect.Type
		var elem reflect.Type
		if t != nil {
			switch t.Kind() {
			case reflect.Struct:
				fields = jsonFields(t)
			case reflect.Map:
				elem = t.Elem()
			}
		}
		var seen memberSet
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return errMalformed
			}
			name, _ := tok.(string)
			field := memberPath(path, name)
			if !seen.add(name) {
				return apperr.Invalid(field, "appears twice in one object")
			}
			next := elem
			if fields != nil {
				ft, known := fields[name]
				if !known {
					for exact := range fields {
						if strings.EqualFold(exact, name) {
							return apperr.Invalid(field, "is not a known field (names are case-sensitive: "+exact+")")
						}
					}
					// Named here with its path (encoding/json's refusal
					// names the member alone), once its value is read:
					// malformed JSON after it is the decoder's to name.
					if err := walkKeys(dec, nil, field, depth+1); err != nil {
						return err
					}
					return apperr.Invalid(field, "is not a known field")
				}
				next = ft
			}
			if err := walkKeys(dec, next, field, depth+1); err != nil {
				return err
			}
		}
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return errMalformed
	}
	return nil
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// memberSet holds an object's member names: a slice while they are few (a
// request's objects mostly are), a map past that, so a body of many
// members costs linear time.
type memberSet struct {
	few  []string
	many map[string]struct{}
}

// add records name and says whether it is new.
func (m *memberSet) add(name string) bool {
	if m.many != nil {
		if _, ok := m.many[name]; ok {
			return false
		}
		m.many[name] = struct{}{}
		return true
	}
	if slices.Contains(m.few, name) {
		return false
	}
	m.few = append(m.few, name)
	if len(m.few) > 16 {
		m.many = make(map[string]struct{}, 2*len(m.few))
		for _, n := range m.few {
			m.many[n] = struct{}{}
		}
	}
	return true
}

// jsonFieldsCache holds each struct type's member names (encoding/json's:
// the tag's name, or the field's; embedded structs' fields promoted).
var jsonFieldsCache sync.Map // reflect.Type -> map[string]reflect.Type

func jsonFields(t reflect.Type) map[string]reflect.Type {
	if v, ok := jsonFieldsCache.Load(t); ok {
		return v.(map[string]reflect.Type)
	}
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			inner := ft
			if inner.Kind() == reflect.Pointer {
				inner = inner.Elem()
			}
			if inner.Kind() == reflect.Struct {
				for n, typ := range jsonFields(inner) {
					if _, ok := out[n]; !ok {
						out[n] = typ
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = ft
	}
	jsonFieldsCache.Store(t, out)
	return out
}
