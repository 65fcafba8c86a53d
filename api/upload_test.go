package api_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gofrs/flock"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
)

// A 1x1 PNG.
var pngPixel, _ = base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")

func (h *harness) upload(token string, name string, content []byte) resp {
	h.t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	part, _ := w.CreateFormFile("file", name)
	_, _ = part.Write(content)
	_ = w.Close()
	req, _ := http.NewRequest("POST", h.http.URL+"/api/upload", &buf)
	req.Header.Set("Content-Type", w.FormDataContentType())
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := h.http.Client().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	validateResponse(h.t, req, res.StatusCode, res.Header, raw)
	out := resp{Status: res.StatusCode, Raw: string(raw), Header: res.Header}
	_ = json.Unmarshal(raw, &out.Body)
	return out
}

func TestUploads(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		a, b := h.signup(), h.signup()
		r := h.upload(a.Session, "logo.png", pngPixel)
		expect(t, r, 201, "")
		key := r.str("data", "key")
		if !strings.HasPrefix(key, "merchants/"+a.ID+"/") || r.str("data", "url") != "/uploads/"+key {
			t.Fatalf("upload %s", r.Raw)
		}
		// The file is served publicly (logos appear on the checkout page).
		res, err := h.http.Client().Get(h.http.URL + "/uploads/" + key)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !bytes.Equal(body, pngPixel) || res.Header.Get("Content-Type") != "image/png" {
			t.Fatalf("serve: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
		}
		expect(t, h.do("PATCH", "/api/merchant/logo", a.Session, map[string]any{"logoUrl": "https://shop.example/uploads/" + key}), 200, "")
		// The uploaded image's own path is a logo too (what the hosted pages
		// show); another merchant's upload is not.
		expect(t, h.do("PATCH", "/api/merchant/logo", a.Session, map[string]any{"logoUrl": "/uploads/" + key}), 200, "")
		if got := h.do("GET", "/api/merchant", a.Session, nil).str("data", "logoUrl"); got != "/uploads/"+key {
			t.Fatalf("logoUrl %q", got)
		}
		expectField(t, h.do("PATCH", "/api/merchant", h.signup().Session, map[string]any{"logoUrl": "/uploads/" + key}), "logoUrl")
		expectField(t, h.do("PATCH", "/api/merchant/logo", a.Session, map[string]any{"logoUrl": "/uploads/../etc/passwd"}), "logoUrl")

		// Bad uploads.
		expectField(t, h.upload(a.Session, "x.txt", []byte("hello, not an image")), "file")
		expectField(t, h.upload(a.Session, "big.png", append(append([]byte{}, pngPixel...), make([]byte, 2<<20)...)), "file")
		expect(t, h.upload(a.TestKey, "logo.png", pngPixel), 401, "UNAUTHORIZED")

		// Deleting: another merchant's key, traversal and foreign shapes are 403.
		expect(t, h.do("DELETE", "/api/upload/"+key, b.Session, nil), 403, "FORBIDDEN")
		if !strings.Contains(h.do("DELETE", "/api/upload/"+key, b.Session, nil).str("message"), "outside your own directory") {
			t.Fatal("403 message must say why")
		}
		expect(t, h.do("DELETE", "/api/upload/merchants/"+a.ID+"/../"+b.ID+"/x.png", a.Session, nil), 403, "FORBIDDEN")
		expect(t, h.do("DELETE", "/api/upload/etc/passwd", a.Session, nil), 403, "FORBIDDEN")
		expect(t, h.do("DELETE", "/api/upload/"+key, a.TestKey, nil), 401, "UNAUTHORIZED")
		// The logo is not deleted from under the pages; a file nothing
		// shows is.
		expect(t, h.do("DELETE", "/api/upload/"+key, a.Session, nil), 409, "CONFLICT")
		expect(t, h.do("PATCH", "/api/merchant", a.Session, map[string]any{"logoUrl": ""}), 200, "")
		key = h.upload(a.Session, "loose.png", pngPixel).str("data", "key")
		r = h.do("DELETE", "/api/upload/"+key, a.Session, nil)
		expect(t, r, 200, "")
		expect(t, h.do("DELETE", "/api/upload/"+key, a.Session, nil), 404, "NOT_FOUND")
		expect(t, h.do("DELETE", "/api/upload/merchants/"+a.ID+"/"+models.NewID()+".png", a.Session, nil), 404, "NOT_FOUND")
	})
}

// TestUploadQuota: a merchant's uploads are bounded (50 files): the next
// one is a 409 with a hint, nothing is written, and deleting a file makes
// room. Another merchant is not affected.
func TestUploadQuota(t *testing.T) {
	h := newHarness(t, storetest.Open(t, "sqlite"))
	a, b := h.signup(), h.signup()
	var first string
	for i := 0; i < api.MaxUploadsPerMerchant; i++ {
		r := h.upload(a.Session, "logo.png", pngPixel)
		expect(t, r, 201, "")
		if i == 0 {
			first = r.str("data", "key")
		}
	}
	full := h.upload(a.Session, "logo.png", pngPixel)
	expect(t, full, 409, "CONFLICT")
	if !strings.Contains(full.str("message"), "upload quota") || !strings.Contains(full.str("hint"), "DELETE /api/upload/") {
		t.Fatalf("quota answer %s", full.Raw)
	}
	expect(t, h.upload(b.Session, "logo.png", pngPixel), 201, "")
	expect(t, h.do("DELETE", "/api/upload/"+first, a.Session, nil), 200, "")
	expect(t, h.upload(a.Session, "logo.png", pngPixel), 201, "")
}

// TestUploadQuotaAcrossProcesses: the quota's check and the write hold a
// lock file beside the merchant's directory, so API processes sharing the
// upload directory cannot both take the last place. The test holds the
// lock as another process would (its own open file), writes that
// process's file, then lets go: the upload waited, and is refused.
func TestUploadQuotaAcrossProcesses(t *testing.T) {
	h := newHarness(t, storetest.Open(t, "sqlite"))
	a := h.signup()
	for i := 0; i < api.MaxUploadsPerMerchant-1; i++ {
		expect(t, h.upload(a.Session, "logo.png", pngPixel), 201, "")
	}
	dir := filepath.Join(h.srv.UploadDir, "merchants", a.ID)
	other := flock.New(dir + ".lock")
	if err := other.Lock(); err != nil {
		t.Fatal(err)
	}
	done := make(chan resp, 1)
	go func() { done <- h.upload(a.Session, "logo.png", pngPixel) }()
	select {
	case r := <-done:
		t.Fatalf("the upload did not wait for the other process's lock: %s", r.Raw)
	case <-time.After(300 * time.Millisecond):
	}
	if err := os.WriteFile(filepath.Join(dir, models.NewID()+".png"), pngPixel, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := other.Unlock(); err != nil {
		t.Fatal(err)
	}
	expect(t, <-done, 409, "CONFLICT")

	// A process that keeps the lock (hung) does not hold uploads forever:
	// after the wait, 503 in the envelope with a Retry-After.
	b := h.signup()
	expect(t, h.upload(b.Session, "logo.png", pngPixel), 201, "")
	defer api.SetUploadLockWait(100 * time.Millisecond)()
	hung := flock.New(filepath.Join(h.srv.UploadDir, "merchants", b.ID) + ".lock")
	if err := hung.Lock(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hung.Unlock() }()
	r := h.upload(b.Session, "logo.png", pngPixel)
	expect(t, r, 503, "SERVICE_UNAVAILABLE")
	if r.Header.Get("Retry-After") == "" {
		t.Fatalf("no Retry-After: %v", r.Header)
	}
}

// TestReplacedLogoIsDeleted: a logo replaced (by either route) is deleted
// once nothing shows it, so changing the logo never fills the quota; one a
// product shows, or an image of a URL elsewhere, stays. Before, every old
// logo stayed on disk, listed nowhere, and about ten changes locked the
// merchant out of a new one (found by an audit helper).
func TestReplacedLogoIsDeleted(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		a := h.signup()
		logo := func() string {
			t.Helper()
			r := h.upload(a.Session, "logo.png", pngPixel)
			expect(t, r, 201, "")
			return r.str("data", "url")
		}
		served := func(u string) int {
			t.Helper()
			res, err := h.http.Client().Get(h.http.URL + u)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			return res.StatusCode
		}
		first := logo()
		expect(t, h.do("PATCH", "/api/merchant/logo", a.Session, map[string]any{"logoUrl": first}), 200, "")
		for i := 0; i < api.MaxUploadsPerMerchant+5; i++ {
			next := logo()
			expect(t, h.do("PATCH", "/api/merchant/logo", a.Session, map[string]any{"logoUrl": next}), 200, "")
			if served(first) != 404 {
				t.Fatalf("change %d: the replaced logo %s is still served", i+1, first)
			}
			first = next
		}
		// Shown by a product too: kept when the logo moves on.
		expect(t, h.do("POST", "/api/v1/products", a.TestKey, map[string]any{"name": "Mug", "price": "4.00", "imageUrl": first}), 201, "")
		expect(t, h.do("PATCH", "/api/merchant", a.Session, map[string]any{"logoUrl": "https://shop.example/logo.png"}), 200, "")
		if served(first) != 200 {
			t.Fatal("an image a product shows was deleted with the logo")
		}
		// A range is not served (whole image, 200), so never a 416 outside
		// the error envelope.
		req, _ := http.NewRequest("GET", h.http.URL+first, nil)
		req.Header.Set("Range", "bytes=999999-")
		if res, err := h.http.Client().Do(req); err != nil || res.StatusCode != 200 {
			t.Fatalf("a range past the end: %v %v", res, err)
		} else {
			res.Body.Close()
		}
		// A product's replaced image goes too, once nothing shows it.
		prod := h.do("POST", "/api/v1/products", a.TestKey, map[string]any{"name": "Cup", "price": "3.00", "imageUrl": logo()})
		expect(t, prod, 201, "")
		cupImage := prod.str("data", "imageUrl")
		expect(t, h.do("PATCH", "/api/v1/products/"+prod.str("data", "id"), a.TestKey, map[string]any{"imageUrl": logo()}), 200, "")
		if served(cupImage) != 404 {
			t.Fatal("a product's replaced image is still served")
		}
		// The logo and a product's image are not deleted from under the
		// pages (409); a file nothing shows is.
		expect(t, h.do("DELETE", "/api/upload/"+strings.TrimPrefix(first, "/uploads/"), a.Session, nil), 409, "CONFLICT")
		loose := logo()
		expect(t, h.do("DELETE", "/api/upload/"+strings.TrimPrefix(loose, "/uploads/"), a.Session, nil), 200, "")
		// Set twice to the same: nothing deleted.
		again := logo()
		for range 2 {
			expect(t, h.do("PATCH", "/api/merchant", a.Session, map[string]any{"logoUrl": again}), 200, "")
		}
		if served(again) != 200 {
			t.Fatal("the logo in use was deleted")
		}
	})
}
