package api

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/money"
)

func (s *Server) registerSettlements(g *gin.RouterGroup) {
	s.Handle(g, http.MethodPost, "/settlements", AuthSession, s.createSettlement)
	s.Handle(g, http.MethodGet, "/settlements", AuthSession, s.listSettlements)
	s.Handle(g, http.MethodGet, "/settlements/balance", AuthSession, s.settlementBalance)
}

type settlementJSON struct {
	ID                string       `json:"id"`
	Amount            money.Amount `json:"amount"`
	Token             string       `json:"token"`
	Network           string       `json:"network"`
	DestinationWallet string       `json:"destinationWallet"`
	TxHash            string       `json:"txHash"`
	Status            string       `json:"status"`
	CreatedAt         Time         `json:"createdAt"`
}

type createSettlementRequest struct {
	Amount            json.RawMessage `json:"amount"`
	Token             string          `json:"token"`
	Network           string          `json:"network"`
	DestinationWallet string          `json:"destinationWallet"`
	TxHash            string          `json:"txHash"`
}

// createSettlement records a payout of live funds; testnets are refused
// (SPEC.md Errors rule 4) and the amount must fit the network's balance.
func (s *Server) createSettlement(c *gin.Context) {
	var req createSettlementRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	amount := v.amount("amount", req.Amount, true, money.Scale)
	v.oneOf("token", req.Token, true, "USDC")
	var network, dest, hash string
	if m, ok := chain.ModeOf(strings.TrimSpace(req.Network)); ok && m == chain.ModeTest {
		v.Add("network", "settlements are not allowed on testnet networks")
	} else {
		network = v.network("network", req.Network, models.ModeLive)
	}
	if !v.Has("network") {
		dest = v.address("destinationWallet", network, req.DestinationWallet)
		hash = v.txHash("txHash", network, req.TxHash)
	}
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	st := &models.Settlement{MerchantID: principal(c).MerchantID, Amount: amount, Token: req.Token, Network: network,
		DestinationWallet: dest, TxHash: hash}
	if err := s.Store.CreateSettlement(c.Request.Context(), st); err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusCreated, settlementJSON{ID: st.ID, Amount: st.Amount, Token: st.Token, Network: st.Network,
		DestinationWallet: st.DestinationWallet, TxHash: st.TxHash, Status: st.Status, CreatedAt: ts(st.CreatedAt)})
}

func (s *Server) listSettlements(c *gin.Context) {
	rows, err := s.Store.Settlements(c.Request.Context(), principal(c).MerchantID)
	if err != nil {
		fail(c, err)
		return
	}
	out := make([]settlementJSON, 0, len(rows))
	for _, st := range rows {
		out = append(out, settlementJSON{ID: st.ID, Amount: st.Amount, Token: st.Token, Network: st.Network,
			DestinationWallet: st.DestinationWallet, TxHash: st.TxHash, Status: st.Status, CreatedAt: ts(st.CreatedAt)})
	}
	respondArray(c, out)
}

type balanceJSON struct {
	Network   string       `json:"network"`
	Token     string       `json:"token"`
	Collected money.Amount `json:"collected"`
	Settled   money.Amount `json:"settled"`
	// Refunded is what succeeded refunds returned; RefundsPending what
	// refunds in progress hold. Both are subtracted from Available.
	Refunded       money.Amount `json:"refunded"`
	RefundsPending money.Amount `json:"refundsPending"`
	Available      money.Amount `json:"available"`
}

// settlementBalance answers what can be paid out, per network and token.
func (s *Server) settlementBalance(c *gin.Context) {
	bals, err := s.Store.Balances(c.Request.Context(), principal(c).MerchantID)
	if err != nil {
		fail(c, err)
		return
	}
	out := make([]balanceJSON, 0, len(bals))
	for _, b := range bals {
		out = append(out, balanceJSON{Network: b.Network, Token: b.Token, Collected: b.Collected, Settled: b.Settled,
			Refunded: b.Refunded, RefundsPending: b.RefundsPending, Available: b.Available})
	}
	respondArray(c, out)
}
