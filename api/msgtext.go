package api

import (
	"strconv"
	"strings"
)

// A BAD_REQUEST message is "field: reason" items joined by "; " (SPEC.md,
// Errors rule 1), so a client splits it on "; " and each item at its first
// ": ". Text a request supplied (a member name, a metadata key, an unknown
// event's name) must not be able to add an item or move that split: a body
// member named "name; amount" would otherwise read as an error about
// amount. quoted and memberPath put such text in a message.

// quoted is s for a message: Go-quoted (control characters, quotes and
// backslashes escaped), ';', ':' and ' ' as \u003b, \u003a and \u0020 (a
// field part holds no space), and cut to max characters with "…".
func quoted(s string, max int) string {
	if r := []rune(s); len(r) > max {
		s = string(r[:max]) + "…"
	}
	return messageEscapes.Replace(strconv.Quote(s))
}

var messageEscapes = strings.NewReplacer(";", `\u003b`, ":", `\u003a`, " ", `\u0020`)

// memberPath names member name of the object at path (a field name, "" at
// the root): path.name for a plain name (letters, digits, '_' and '-', at
// most 64), path["…"] (quoted) for any other.
func memberPath(path, name string) string {
	if !plainName(name) {
		return path + "[" + quoted(name, 64) + "]"
	}
	if path == "" {
		return name
	}
	return path + "." + name
}

func plainName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}
