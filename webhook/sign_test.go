package webhook

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The Standard Webhooks specification's published test vector.
const (
	vectorSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorUnix   = 1614265330
	vectorBody   = `{"test": 2432232314}`
	vectorSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func TestSignTestVector(t *testing.T) {
	got, err := Sign(vectorSecret, vectorID, time.Unix(vectorUnix, 0), []byte(vectorBody))
	if err != nil {
		t.Fatal(err)
	}
	if got != vectorSig {
		t.Fatalf("Sign = %q, want %q", got, vectorSig)
	}
}

func TestVerifyTestVector(t *testing.T) {
	h := headersFor(vectorID, vectorUnix, vectorSig)
	if err := Verify(vectorSecret, h, []byte(vectorBody), DefaultTolerance, time.Unix(vectorUnix+10, 0)); err != nil {
		t.Fatalf("Verify: %v", err)
	}
}

func headersFor(id string, unix int64, sig string) http.Header {
	h := http.Header{}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(unix, 10))
	h.Set(HeaderSignature, sig)
	return h
}

func TestNewSecret(t *testing.T) {
	a, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewSecret()
	if a == b {
		t.Fatal("two secrets are equal")
	}
	if !strings.HasPrefix(a, SecretPrefix) {
		t.Fatalf("secret %q lacks %q", a, SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(a, SecretPrefix))
	if err != nil || len(key) != 32 {
		t.Fatalf("secret key: %d bytes, err %v", len(key), err)
	}
}

func TestSignVerifyRoundTrip(t *testing.T) {
	secret, _ := NewSecret()
	now := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	body := []byte(`{"event":"checkout.completed","data":{"amount":"32.61"}}`)
	sig, err := Sign(secret, "dlv_1", now, body)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(secret, headersFor("dlv_1", now.Unix(), sig), body, DefaultTolerance, now); err != nil {
		t.Fatalf("round trip: %v", err)
	}
	// Several signatures (key rotation): any matching v1 is enough.
	other, _ := NewSecret()
	oldSig, _ := Sign(other, "dlv_1", now, body)
	multi := "v2,abc " + oldSig + " " + sig
	if err := Verify(secret, headersFor("dlv_1", now.Unix(), multi), body, DefaultTolerance, now); err != nil {
		t.Fatalf("multiple signatures: %v", err)
	}
	// The prefix is optional, as in the reference libraries.
	if err := Verify(strings.TrimPrefix(secret, SecretPrefix), headersFor("dlv_1", now.Unix(), sig), body, DefaultTolerance, now); err != nil {
		t.Fatalf("unprefixed secret: %v", err)
	}
}

func TestVerifyRejects(t *testing.T) {
	secret, _ := NewSecret()
	wrong, _ := NewSecret()
	now := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	body := []byte(`{"event":"checkout.completed"}`)
	sig, _ := Sign(secret, "dlv_1", now, body)
	good := func() http.Header { return headersFor("dlv_1", now.Unix(), sig) }

	cases := []struct {
		name    string
		secret  string
		headers http.Header
		body    []byte
		now     time.Time
		want    error
	}{
		{"tampered body", secret, good(), []byte(`{"event":"checkout.completeD"}`), now, ErrNoMatchingSignature},
		{"tampered id", secret, headersFor("dlv_2", now.Unix(), sig), body, now, ErrNoMatchingSignature},
		{"tampered timestamp", secret, headersFor("dlv_1", now.Unix()+1, sig), body, now, ErrNoMatchingSignature},
		{"wrong secret", wrong, good(), body, now, ErrNoMatchingSignature},
		{"expired", secret, good(), body, now.Add(DefaultTolerance + time.Second), ErrTimestampOutOfTolerance},
		{"from the future", secret, good(), body, now.Add(-DefaultTolerance - time.Second), ErrTimestampOutOfTolerance},
		{"missing signature", secret, headersFor("dlv_1", now.Unix(), ""), body, now, ErrMissingHeaders},
		{"missing id", secret, headersFor("", now.Unix(), sig), body, now, ErrMissingHeaders},
		{"bad timestamp", secret, func() http.Header { h := good(); h.Set(HeaderTimestamp, "12a"); return h }(), body, now, ErrInvalidTimestamp},
		{"timestamp not as signed", secret, func() http.Header {
			h := good()
			h.Set(HeaderTimestamp, "+0"+h.Get(HeaderTimestamp))
			return h
		}(), body, now, ErrInvalidTimestamp},
		{"unknown version only", secret, headersFor("dlv_1", now.Unix(), "v2"+sig[2:]), body, now, ErrNoMatchingSignature},
		{"bad base64", secret, headersFor("dlv_1", now.Unix(), "v1,!!!"), body, now, ErrNoMatchingSignature},
		{"bad secret", "whsec_%%%", good(), body, now, ErrInvalidSecret},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Verify(tc.secret, tc.headers, tc.body, DefaultTolerance, tc.now)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
			if tc.want != ErrInvalidSecret && !errors.Is(err, ErrVerification) {
				t.Fatalf("%v does not wrap ErrVerification", err)
			}
		})
	}
}

func TestSignRejectsBadSecret(t *testing.T) {
	for _, s := range []string{"", "whsec_", "whsec_not base64"} {
		if _, err := Sign(s, "id", time.Now(), nil); !errors.Is(err, ErrInvalidSecret) {
			t.Errorf("Sign(%q) err = %v", s, err)
		}
	}
}

func FuzzVerify(f *testing.F) {
	f.Add("dlv_1", "1614265330", vectorSig, []byte(vectorBody))
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		h := http.Header{}
		h.Set(HeaderID, id)
		h.Set(HeaderTimestamp, ts)
		h.Set(HeaderSignature, sig)
		_ = Verify(vectorSecret, h, body, DefaultTolerance, time.Unix(vectorUnix, 0))
	})
}
