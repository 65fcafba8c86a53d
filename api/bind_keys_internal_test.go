package api

import (
	"errors"
	"reflect"
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
		{`{"amount":`, ""},                     // malformed: the decoder's
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
