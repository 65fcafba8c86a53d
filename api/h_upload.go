package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/gofrs/flock"
	"github.com/google/uuid"
	"github.com/paygate/paygate/apperr"
)

// MaxUploadBytes bounds an uploaded image (a logo).
const MaxUploadBytes = 2 << 20

// Each merchant's uploads are bounded (signup is open: without a bound one
// account could fill the disk): at most MaxUploadsPerMerchant files and
// MaxUploadBytesPerMerchant bytes; a merchant at the bound deletes files it
// no longer uses (DELETE /api/upload/{key}).
const (
	MaxUploadsPerMerchant     = 50
	MaxUploadBytesPerMerchant = 20 << 20
)

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
	merchant := principal(c).MerchantID
	key := fmt.Sprintf("merchants/%s/%s%s", merchant, uuid.NewString(), ext)
	path := filepath.Join(s.UploadDir, filepath.FromSlash(key))
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		fail(c, err)
		return
	}
	// One upload of a merchant at a time, so two cannot both pass the
	// bound: in this process, and across the API processes sharing the
	// upload directory (a lock file beside the merchant's directory). The
	// wait for both is bounded: a replica hung holding the file (or a
	// volume whose locks hang) answers 503 instead of holding this request
	// and, queued behind it, the merchant's later ones.
	ctx, cancel := context.WithTimeout(c.Request.Context(), uploadLockWait)
	defer cancel()
	busy := apperr.Unavailable("another upload of yours is in progress; try again", time.Second)
	turn := s.uploadTurn(merchant)
	select {
	case turn <- struct{}{}:
		defer func() { <-turn }()
	case <-ctx.Done():
		fail(c, busy)
		return
	}
	lock := flock.New(filepath.Dir(path) + ".lock")
	switch ok, err := lock.TryLockContext(ctx, 20*time.Millisecond); {
	case ok:
		defer func() { _ = lock.Unlock() }()
	case err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		fail(c, busy)
		return
	default:
		fail(c, fmt.Errorf("upload lock: %w", err))
		return
	}
	if err := uploadRoom(filepath.Dir(path), len(data)); err != nil {
		fail(c, err)
		return
	}
	if err := os.WriteFile(path, data, 0o640); err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusCreated, gin.H{"key": key, "url": "/uploads/" + key, "contentType": http.DetectContentType(data), "size": len(data)})
}

// uploadLockWait bounds the wait for the merchant's turn to upload: behind
// its other uploads in this process, and for the lock file another API
// process holds while it stores one.
var uploadLockWait = 10 * time.Second

// uploadTurn is the merchant's upload turn in this process: a channel of
// one slot, taken by sending, given back by receiving.
func (s *Server) uploadTurn(merchantID string) chan struct{} {
	turn, _ := s.uploadLocks.LoadOrStore(merchantID, make(chan struct{}, 1))
	return turn.(chan struct{})
}

// uploadRoom refuses a file of size bytes in dir when the merchant's files
// there would pass MaxUploadsPerMerchant or MaxUploadBytesPerMerchant.
func uploadRoom(dir string, size int) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	total := int64(size)
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			total += info.Size()
		}
	}
	if len(entries) >= MaxUploadsPerMerchant || total > MaxUploadBytesPerMerchant {
		return apperr.WithHint(apperr.ErrConflict, fmt.Sprintf("upload quota reached: at most %d files and %d MiB per merchant",
			MaxUploadsPerMerchant, MaxUploadBytesPerMerchant>>20), "delete files you no longer use with DELETE /api/upload/{key}")
	}
	return nil
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
	// An image the hosted pages show (the logo, a product's) is not
	// deleted from under them: the page would show a broken image.
	used, err := s.Store.ImageInUse(c.Request.Context(), m[1], "/uploads/"+key)
	if err != nil {
		fail(c, err)
		return
	}
	if used {
		fail(c, apperr.WithHint(apperr.ErrConflict, "the file is shown as your logo or a product's image",
			"set another logo or image first; the one replaced is deleted then"))
		return
	}
	err = os.Remove(filepath.Join(s.UploadDir, filepath.FromSlash(key)))
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

// dropReplacedImage deletes the merchant's uploaded image at u once nothing
// shows it (a replaced logo): kept, every logo change took a place of the
// upload quota, and after about ten no logo could be uploaded (the old
// files' keys are listed nowhere; found by an audit helper). A failure is
// logged: the change itself is done.
func (s *Server) dropReplacedImage(ctx context.Context, merchantID, u string) {
	key, ok := strings.CutPrefix(u, "/uploads/")
	if m := uploadKey.FindStringSubmatch(key); !ok || s.UploadDir == "" || m == nil || m[1] != merchantID {
		return
	}
	used, err := s.Store.ImageInUse(ctx, merchantID, u)
	if err == nil && !used {
		err = os.Remove(filepath.Join(s.UploadDir, filepath.FromSlash(key)))
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		slog.WarnContext(ctx, "replaced image not deleted", "merchantId", merchantID, "url", u, "err", err)
	}
}

func (s *Server) serveUpload(c *gin.Context) {
	key := strings.TrimPrefix(c.Param("key"), "/")
	if !uploadKey.MatchString(key) {
		fail(c, apperr.NotFound())
		return
	}
	f, err := os.Open(filepath.Join(s.UploadDir, filepath.FromSlash(key)))
	if err != nil {
		fail(c, apperr.NotFound())
		return
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		fail(c, apperr.NotFound())
		return
	}
	// The type the upload was sniffed as, named by its extension; streamed
	// (with Last-Modified), not read whole per request. Whole: an image of
	// 2 MiB at most needs no ranges, and ServeContent answered a range past
	// the end with a text/plain 416, outside the error envelope.
	c.Request.Header.Del("Range")
	c.Header("Content-Type", uploadContentTypes[filepath.Ext(key)])
	c.Header("X-Content-Type-Options", "nosniff")
	c.Header("Cache-Control", "public, max-age=86400")
	http.ServeContent(c.Writer, c.Request, "", info.ModTime(), f)
}

// uploadContentTypes maps a stored file's extension to its type.
var uploadContentTypes = func() map[string]string {
	m := map[string]string{}
	for t, ext := range uploadTypes {
		m[ext] = t
	}
	return m
}()
