package models

import (
	"database/sql/driver"
	"encoding/json"
	"fmt"
)

// StringList is a list of strings kept as a JSON text column, so it reads the
// same on SQLite and PostgreSQL.
type StringList []string

// Value encodes the list as JSON text.
func (l StringList) Value() (driver.Value, error) {
	if l == nil {
		return "[]", nil
	}
	b, err := json.Marshal([]string(l))
	return string(b), err
}

// Scan decodes JSON text.
func (l *StringList) Scan(src any) error { return scanJSON(src, l) }

// StringMap is a string-to-string object kept as a JSON text column.
type StringMap map[string]string

// Value encodes the map as JSON text.
func (m StringMap) Value() (driver.Value, error) {
	if m == nil {
		return "{}", nil
	}
	b, err := json.Marshal(map[string]string(m))
	return string(b), err
}

// Scan decodes JSON text.
func (m *StringMap) Scan(src any) error { return scanJSON(src, m) }

// JSONText is an opaque JSON document (event payloads).
type JSONText []byte

// Value stores the document as text.
func (j JSONText) Value() (driver.Value, error) {
	if len(j) == 0 {
		return "null", nil
	}
	return string(j), nil
}

// Scan reads the document.
func (j *JSONText) Scan(src any) error {
	switch v := src.(type) {
	case string:
		*j = append((*j)[:0], v...)
	case []byte:
		*j = append((*j)[:0], v...)
	case nil:
		*j = nil
	default:
		return fmt.Errorf("models: cannot scan %T into JSONText", src)
	}
	return nil
}

// MarshalJSON returns the document itself.
func (j JSONText) MarshalJSON() ([]byte, error) {
	if len(j) == 0 {
		return []byte("null"), nil
	}
	return j, nil
}

func scanJSON(src any, dst any) error {
	switch v := src.(type) {
	case string:
		return json.Unmarshal([]byte(v), dst)
	case []byte:
		return json.Unmarshal(v, dst)
	case nil:
		return nil
	default:
		return fmt.Errorf("models: cannot scan %T as JSON", src)
	}
}
