package devchain

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// SessionPayment is what PaySession did.
type SessionPayment struct {
	SessionID string
	Network   string
	To        string
	Units     *big.Int
	TxHash    string
}

// PaySession pays a checkout session as a customer's wallet and page would:
// it reads what the session expects from the public status route of the API
// at apiBase, signs and broadcasts the USDC transfer on the chain at rpcURL
// with key, then submits the hash. units overrides the amount (nil pays
// exactly what is due), so a short payment can be shown failing.
func PaySession(ctx context.Context, apiBase, rpcURL string, key *ecdsa.PrivateKey, sessionID string, units *big.Int) (SessionPayment, error) {
	apiBase = strings.TrimSuffix(apiBase, "/")
	var poll struct {
		Data struct {
			Session struct {
				ID                    string `json:"id"`
				Network               string `json:"network"`
				MerchantWalletAddress string `json:"merchantWalletAddress"`
				TokenAddress          string `json:"tokenAddress"`
				AmountUnits           string `json:"amountUnits"`
			} `json:"session"`
		} `json:"data"`
	}
	if err := callJSON(ctx, http.MethodGet, apiBase+"/api/checkout/session/"+sessionID, nil, &poll); err != nil {
		return SessionPayment{}, err
	}
	s := poll.Data.Session
	if units == nil {
		v, ok := new(big.Int).SetString(s.AmountUnits, 10)
		if !ok {
			return SessionPayment{}, fmt.Errorf("session %s: amountUnits %q is not an integer", sessionID, s.AmountUnits)
		}
		units = v
	}
	if !common.IsHexAddress(s.TokenAddress) || !common.IsHexAddress(s.MerchantWalletAddress) {
		return SessionPayment{}, fmt.Errorf("session %s is on %s, which the dev chain cannot pay", sessionID, s.Network)
	}
	hash, err := PayUSDC(ctx, rpcURL, key, common.HexToAddress(s.TokenAddress), common.HexToAddress(s.MerchantWalletAddress), units)
	if err != nil {
		return SessionPayment{}, fmt.Errorf("broadcast: %w", err)
	}
	body, _ := json.Marshal(map[string]string{"sessionId": sessionID, "txHash": hash})
	var out map[string]any
	if err := callJSON(ctx, http.MethodPost, apiBase+"/api/checkout/submit", body, &out); err != nil {
		return SessionPayment{}, fmt.Errorf("submit %s: %w", hash, err)
	}
	return SessionPayment{SessionID: sessionID, Network: s.Network, To: s.MerchantWalletAddress, Units: units, TxHash: hash}, nil
}

var apiClient = &http.Client{Timeout: 30 * time.Second}

func callJSON(ctx context.Context, method, url string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := apiClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if res.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %d %s", method, url, res.StatusCode, raw)
	}
	return json.Unmarshal(raw, out)
}
