package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/money"
)

type keysBase struct {
	Mode string `json:"mode"`
}

type keysBody struct {
	keysBase
	Amount  money.Amount `json:"amount"`
	Wallets *struct {
		EVM string `json:"evm"`
	} `json:"wallets"`
	Items []struct {
		Name string `json:"name"`
	} `json:"items"`
	Metadata map[string]string `json:"metadata"`
	Untagged string
	Skipped  string `json:"-"`
}

// TestCheckKeys: member names in another case, or twice in one object,
// are refused at any depth with the field's dotted path; what encoding/json
// reads exactly passes, and malformed JSON is left to the decoder.
func TestCheckKeys(t *testing.T) {
	typ := reflect.TypeFor[*keysBody]()
	for _, tc := range []struct {
		body, field string // field "" : accepted
	}{
		{`{"amount":"1.00","mode":"test","wallets":{"evm":"0x1"},"items":[{"name":"a"},{"name":"b"}],"metadata":{"A":"1","a":"2"},"Untagged":"x"}`, ""},
		{`{"Amount":"1.00"}`, "Amount"},
		{`{"amount":"1.00","AMOUNT":"9.00"}`, "AMOUNT"},
		{`{"amount":"1.00","amount":"9.00"}`, "amount"},
		{`{"MODE":"live"}`, "MODE"},                  // a promoted field
		{`{"wallets":{"EVM":"0x1"}}`, "wallets.EVM"}, // nested
		{`{"items":[{"name":"a"},{"Name":"b"}]}`, "items.Name"},
		{`{"metadata":{"k":"1","k":"2"}}`, "metadata.k"}, // a map's keys are free, not twice
		{`{"untagged":"x"}`, "untagged"},
		{`{"sweep":{"x":1,"x":2}}`, "sweep.x"}, // unknown: left to the decoder, duplicates still refused
		{`{"metadata":{` + manyMembers(40, "") + `}}`, ""},
		{`{"metadata":{` + manyMembers(40, "k7") + `}}`, "metadata.k7"}, // past the slice
		{`{"items":` + strings.Repeat("[", 31) + strings.Repeat("]", 31) + `}`, ""},
		{`{"items":` + strings.Repeat("[", 500_000) + strings.Repeat("]", 500_000) + `}`, "body"}, // refused at depth 32
		{`{"amount":`, ""}, // malformed: the decoder's
		{`{"amount" "1"}`, ""},
	} {
		err := checkKeys([]byte(tc.body), typ)
		var ve *apperr.ValidationError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.body, err)
		case tc.field != "" && (!errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != tc.field):
			t.Errorf("%s: got %v, want a 400 naming %s", tc.body, err, tc.field)
		}
	}
}

// BenchmarkBindJSON: a create-session body decoded as bindJSON does, with
// its member names checked first, beside the strict decode alone (the
// reference: what the check adds to every JSON request).
func BenchmarkBindJSON(b *testing.B) {
	body := []byte(`{"linkId":"0192f3a4-5b6c-7d8e-9f00-112233445566","quoteToken":"` + strings.Repeat("q", 180) +
		`","walletAddress":"0x52908400098527886E0F7030069857D2E4169EE7","walletType":"metamask","network":"base_sepolia",` +
		`"customer":{"email":"ada@example.com","name":"Ada Lovelace"}}`)
	decode := func(b *testing.B) {
		var req createSessionRequest
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			decode(b)
		}
	})
	b.Run("checkKeys+decode", func(b *testing.B) {
		b.ReportAllocs()
		typ := reflect.TypeFor[*createSessionRequest]()
		for b.Loop() {
			if err := checkKeys(body, typ); err != nil {
				b.Fatal(err)
			}
			decode(b)
		}
	})
}

// manyMembers is n members k0…k(n-1) of an object, then again if given.
func manyMembers(n int, again string) string {
	parts := make([]string, 0, n+1)
	for i := range n {
		parts = append(parts, fmt.Sprintf(`"k%d":"v"`, i))
	}
	if again != "" {
		parts = append(parts, `"`+again+`":"v"`)
	}
	return strings.Join(parts, ",")
}
