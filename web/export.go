package web

import "io/fs"

// Messages returns a language's message table (tests and tools).
func Messages(lang string) (map[string]string, error) {
	all, err := loadMessages()
	if err != nil {
		return nil, err
	}
	return all[lang], nil
}

// TemplateSources returns every template's text by file name (tests lint
// the message keys they use).
func TemplateSources() map[string]string {
	out := map[string]string{}
	entries, _ := fs.ReadDir(files, "templates")
	for _, e := range entries {
		b, err := files.ReadFile("templates/" + e.Name())
		if err == nil {
			out[e.Name()] = string(b)
		}
	}
	return out
}
