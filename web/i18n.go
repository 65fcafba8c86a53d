package web

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/gin-gonic/gin"
)

// languages are the message tables in i18n/, English first (the fallback).
var languages = []string{"en", "de"}

func loadMessages() (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	for _, l := range languages {
		b, err := files.ReadFile("i18n/" + l + ".json")
		if err != nil {
			return nil, err
		}
		m := map[string]string{}
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("web: i18n/%s.json: %w", l, err)
		}
		out[l] = m
	}
	// Every language has every key, so no page ever shows a raw key.
	for _, l := range languages[1:] {
		var missing []string
		for k := range out["en"] {
			if _, ok := out[l][k]; !ok {
				missing = append(missing, k)
			}
		}
		for k := range out[l] {
			if _, ok := out["en"][k]; !ok {
				missing = append(missing, k+" (unknown in en)")
			}
		}
		if len(missing) > 0 {
			sort.Strings(missing)
			return nil, fmt.Errorf("web: i18n/%s.json: keys differ from en: %s", l, strings.Join(missing, ", "))
		}
	}
	return out, nil
}

// language picks the page's language: ?lang=, then Accept-Language, then English.
func (p *Pages) language(c *gin.Context) string {
	if l := c.Query("lang"); p.msgs[l] != nil {
		return l
	}
	for _, part := range strings.Split(c.GetHeader("Accept-Language"), ",") {
		tag := strings.ToLower(strings.TrimSpace(strings.SplitN(part, ";", 2)[0]))
		if base, _, _ := strings.Cut(tag, "-"); p.msgs[base] != nil {
			return base
		}
	}
	return "en"
}

// translator returns the message function of a language: t "key" args...
// formats the message with fmt verbs; a key missing everywhere is shown as is.
func (p *Pages) translator(lang string) func(key string, args ...any) string {
	m := p.msgs[lang]
	return func(key string, args ...any) string {
		s, ok := m[key]
		if !ok {
			if s, ok = p.msgs["en"][key]; !ok {
				return key
			}
		}
		if len(args) > 0 {
			return fmt.Sprintf(s, args...)
		}
		return s
	}
}
