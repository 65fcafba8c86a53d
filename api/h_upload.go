package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"
	"github.com/paygate/paygate/apperr"
)

// MaxUploadBytes bounds an uploaded image (a logo).
const MaxUploadBytes = 2 << 20

// uploadTypes are the image types accepted, by sniffed content type.
var uploadTypes = map[string]string{"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp"}

// uploadKey is the only shape of key the service hands out.
var uploadKey = regexp.MustCompile(`^merchants/([0-9a-f-]{36})/([0-9a-f-]{36})\.(png|jpg|gif|webp)$`)

func (s *Server) registerUploads(g *gin.RouterGroup) {
	if s.UploadDir == "" {
		return
	}
	s.Handle(g, http.MethodPost, "/upload", AuthSession, s.upload)
	s.Handle(g, http.MethodDelete, "/upload/*key", AuthSession, s.deleteUpload)
	// Uploaded logos are public: the hosted checkout page shows them.
	s.engine.GET("/uploads/*key", s.serveUpload)
	s.routes = append(s.routes, RouteInfo{Method: http.MethodGet, Path: "/uploads/*key", Auth: AuthNone})
}

// upload stores an image (multipart field "file") under the merchant's own
// directory and answers its storage key and public URL.
func (s *Server) upload(c *gin.Context) {
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, MaxUploadBytes+64<<10)
	fh, err := c.FormFile("file")
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			fail(c, apperr.Invalid("file", "must be at most 2 MiB"))
			return
		}
		fail(c, apperr.Invalid("file", "is required (multipart/form-data field \"file\")"))
		return
	}
	if fh.Size > MaxUploadBytes {
		fail(c, apperr.Invalid("file", "must be at most 2 MiB"))
		return
	}
	f, err := fh.Open()
	if err != nil {
		fail(c, apperr.Invalid("file", "could not be read"))
		return
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxUploadBytes+1))
	if err != nil || len(data) == 0 || len(data) > MaxUploadBytes {
		fail(c, apperr.Invalid("file", "must be a non-empty image of at most 2 MiB"))
		return
	}
	ext, ok := uploadTypes[http.DetectContentType(data)]
	if !ok {
		fail(c, apperr.Invalid("file", "must be a PNG, JPEG, GIF or WebP image"))
		return
	}
	key := fmt.Sprintf("merchants/%s/%s%s", principal(c).MerchantID, uuid.NewString(), ext)
	path := filepath.Join(s.UploadDir, filepath.FromSlash(key))
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		fail(c, err)
		return
	}
	if err := os.WriteFile(path, data, 0o640); err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusCreated, gin.H{"key": key, "url": "/uploads/" + key, "contentType": http.DetectContentType(data), "size": len(data)})
}

// deleteUpload removes one of the merchant's own files; any key outside
// the caller's directory is refused with 403 (SPEC.md Errors rule 6).
func (s *Server) deleteUpload(c *gin.Context) {
	key := strings.TrimPrefix(c.Param("key"), "/")
	m := uploadKey.FindStringSubmatch(key)
	if m == nil || m[1] != principal(c).MerchantID {
		fail(c, apperr.Forbidden("files outside your own directory cannot be deleted"))
		return
	}
	err := os.Remove(filepath.Join(s.UploadDir, filepath.FromSlash(key)))
	if errors.Is(err, os.ErrNotExist) {
		fail(c, apperr.NotFound())
		return
	}
	if err != nil {
		fail(c, err)
		return
	}
	respondMessage(c, http.StatusOK, "file deleted")
}

func (s *Server) serveUpload(c *gin.Context) {
	key := strings.TrimPrefix(c.Param("key"), "/")
	if !uploadKey.MatchString(key) {
		fail(c, apperr.NotFound())
		return
	}
	data, err := os.ReadFile(filepath.Join(s.UploadDir, filepath.FromSlash(key)))
	if err != nil {
		fail(c, apperr.NotFound())
		return
	}
	c.Header("X-Content-Type-Options", "nosniff")
	c.Header("Cache-Control", "public, max-age=86400")
	c.Data(http.StatusOK, http.DetectContentType(data), data)
}
