package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/money"
)

func (s *Server) registerTransactions(g *gin.RouterGroup) {
	s.Handle(g, http.MethodPost, "/transactions", AuthKey, s.recordTransaction)
	s.Handle(g, http.MethodGet, "/transactions", AuthKey, s.listTransactions)
	s.Handle(g, http.MethodGet, "/transactions/:id", AuthKey, s.getTransaction)
}

type transactionJSON struct {
	ID                    string       `json:"id"`
	Amount                money.Amount `json:"amount"`
	Token                 string       `json:"token"`
	Network               string       `json:"network"`
	Status                string       `json:"status"`
	CustomerEmail         string       `json:"customerEmail"`
	CustomerName          string       `json:"customerName"`
	CustomerID            *string      `json:"customerId"`
	TxHash                string       `json:"txHash"`
	WalletAddress         string       `json:"walletAddress"`
	MerchantWalletAddress string       `json:"merchantWalletAddress"`
	PaymentLinkID         *string      `json:"paymentLinkId"`
	SessionID             *string      `json:"sessionId"`
	Source                string       `json:"source"`
	// Verification: pending (a record not yet checked on chain), verified
	// or failed; only verified transactions count toward settlements.
	Verification        string `json:"verification"`
	VerificationMessage string `json:"verificationMessage,omitempty"`
	// RefundedAmount is what succeeded refunds returned; RefundableAmount
	// what a new refund may still take (refunds in progress hold theirs).
	RefundedAmount   money.Amount `json:"refundedAmount"`
	RefundableAmount money.Amount `json:"refundableAmount"`
	// Refunds are the transaction's refunds, oldest first.
	Refunds   []refundJSON `json:"refunds"`
	CreatedAt Time         `json:"createdAt"`
}

func toTransactionJSON(t *models.Transaction) transactionJSON {
	return transactionJSON{ID: t.ID, Amount: t.Amount, Token: t.Token, Network: t.Network, Status: t.Status,
		CustomerEmail: t.CustomerEmail, CustomerName: t.CustomerName, CustomerID: t.CustomerID, TxHash: t.TxHash,
		WalletAddress: t.WalletAddress, MerchantWalletAddress: t.MerchantWalletAddress, PaymentLinkID: t.PaymentLinkID,
		SessionID: t.SessionID, Source: t.Source, Verification: t.Verification, VerificationMessage: t.VerificationMessage,
		RefundedAmount: t.RefundedAmount, RefundableAmount: max(t.Amount-t.RefundReserved, 0), Refunds: []refundJSON{},
		CreatedAt: ts(t.CreatedAt)}
}

// transactionsOut maps transactions with their refunds.
func (s *Server) transactionsOut(ctx context.Context, rows ...*models.Transaction) ([]transactionJSON, error) {
	refunds, err := s.refundsOf(ctx, rows...)
	if err != nil {
		return nil, err
	}
	out := make([]transactionJSON, 0, len(rows))
	for _, t := range rows {
		j := toTransactionJSON(t)
		if rs := refunds[t.ID]; len(rs) > 0 {
			j.Refunds = rs
		}
		out = append(out, j)
	}
	return out, nil
}

type recordTransactionRequest struct {
	Amount        json.RawMessage `json:"amount"`
	Token         string          `json:"token"`
	Network       string          `json:"network"`
	TxHash        string          `json:"txHash"`
	WalletAddress string          `json:"walletAddress"`
	CustomerEmail string          `json:"customerEmail"`
	CustomerName  string          `json:"customerName"`
	PaymentLinkID string          `json:"paymentLinkId"`
}

// recordTransaction stores a payment made outside the checkout flow. Within
// the merchant a hash backs one transaction (409 otherwise); the record is
// checked on chain by the worker (verification pending → verified|failed);
// a payment link of the other mode is a 400 (SPEC.md Errors rule 3).
func (s *Server) recordTransaction(c *gin.Context) {
	var req recordTransactionRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	p := principal(c)
	var v checker
	amount := v.amount("amount", req.Amount, true, money.Scale)
	v.oneOf("token", req.Token, true, "USDC")
	network := v.network("network", req.Network, p.Mode)
	networkOK := !v.Has("network")
	var hash, wallet string
	if networkOK {
		hash = v.txHash("txHash", network, req.TxHash)
		wallet = v.address("walletAddress", network, req.WalletAddress)
	} else {
		if req.TxHash == "" {
			v.Add("txHash", "is required")
		}
		if req.WalletAddress == "" {
			v.Add("walletAddress", "is required")
		}
	}
	email := v.email("customerEmail", req.CustomerEmail, false)
	name := v.text("customerName", req.CustomerName, false, 200)
	linkID := v.uuidField("paymentLinkId", req.PaymentLinkID, false)
	var link *models.PaymentLink
	if linkID != "" && !v.Has("paymentLinkId") {
		l, err := s.Store.PaymentLinkOfMerchant(c.Request.Context(), p.MerchantID, linkID)
		switch {
		case errors.Is(err, apperr.ErrNotFound):
			v.Add("paymentLinkId", "no such payment link")
		case err != nil:
			fail(c, err)
			return
		case l.Mode != p.Mode:
			v.Add("paymentLinkId", fmt.Sprintf("the payment link is in %s mode and the key in %s mode", l.Mode, p.Mode))
		case networkOK && !contains(l.Networks, network):
			v.Add("network", "is not accepted by the payment link")
		default:
			link = l
		}
	}
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	t := &models.Transaction{MerchantID: p.MerchantID, Mode: p.Mode, Amount: amount, Token: req.Token, Network: network,
		TxHash: hash, WalletAddress: wallet, CustomerEmail: email, CustomerName: name}
	if link != nil {
		t.PaymentLinkID = &link.ID
		t.MerchantWalletAddress = link.WalletAddresses[network]
	} else {
		m, err := s.Store.Merchant(c.Request.Context(), p.MerchantID)
		if err != nil {
			fail(c, err)
			return
		}
		fam, _ := chain.FamilyOf(network)
		if fam == chain.FamilySolana {
			t.MerchantWalletAddress = m.WalletSolana
		} else {
			t.MerchantWalletAddress = m.WalletEVM
		}
		// A record is verified against the wallet it paid: without one it
		// could only ever fail its verification.
		if t.MerchantWalletAddress == "" {
			fail(c, apperr.Invalid("network", "no default "+string(fam)+" wallet is set on the merchant profile to verify a transfer on "+network+
				" against: set it, or record the transfer with the paymentLinkId of a link that accepts "+network))
			return
		}
	}
	// A transfer to a wallet another merchant proved is that merchant's
	// (the field: where the wallet came from).
	field := "network"
	if link != nil {
		field = "paymentLinkId"
	}
	if err := s.Store.WalletsFree(c.Request.Context(), p.MerchantID, models.NamedWallet{Field: field, Address: t.MerchantWalletAddress, Network: network}); err != nil {
		fail(c, err)
		return
	}
	if err := s.Store.RecordTransaction(c.Request.Context(), t); err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusCreated, toTransactionJSON(t))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (s *Server) listTransactions(c *gin.Context) {
	p := principal(c)
	var v checker
	page := v.page(c.Query)
	f := models.TransactionFilter{
		Status: v.oneOf("status", c.Query("status"), false, "completed"),
		// Every transaction is completed (a payment, or a record); whether
		// the chain bore a record out is its verification: ?verification=
		// verified lists only what counts toward the balance.
		Verification:  v.oneOf("verification", c.Query("verification"), false, models.VerificationPending, models.VerificationVerified, models.VerificationFailed),
		PaymentLinkID: v.uuidField("paymentLinkId", c.Query("paymentLinkId"), false),
		Since:         v.timeParam("since", c.Query("since")),
		Until:         v.timeParam("until", c.Query("until")),
	}
	if n := c.Query("network"); n != "" {
		f.Network = v.network("network", n, p.Mode)
	}
	if h := c.Query("txHash"); h != "" {
		if f.Network != "" && !v.Has("network") {
			f.TxHash = v.txHash("txHash", f.Network, h)
		} else {
			f.TxHash = v.anyTxHash("txHash", h)
		}
	}
	if e := c.Query("customerEmail"); e != "" {
		f.CustomerEmail = v.email("customerEmail", e, false)
	}
	if f.Since != nil && f.Until != nil && !f.Until.After(*f.Since) {
		v.Add("until", "must be after since")
	}
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	rows, more, err := s.Store.Transactions(c.Request.Context(), p.Scope(), f, page)
	if err != nil {
		fail(c, err)
		return
	}
	ptrs := make([]*models.Transaction, 0, len(rows))
	for i := range rows {
		ptrs = append(ptrs, &rows[i])
	}
	out, err := s.transactionsOut(c.Request.Context(), ptrs...)
	if err != nil {
		fail(c, err)
		return
	}
	respondList(c, out, more)
}

// normalizeHash puts a hash in its stored form when its family is unknown:
// EVM hashes are stored lower-case with 0x, Solana signatures as given.
// anyTxHash checks a hash filter given without a network: an EVM hash
// (normalized as stored) or a Solana signature; anything else could match
// no stored row (and a NUL in it, which PostgreSQL refuses in a query, was
// a 500).
func (v *checker) anyTxHash(field, s string) string {
	s = strings.TrimSpace(s)
	for _, f := range []chain.Family{chain.FamilyEVM, chain.FamilySolana} {
		if h, err := chain.ParseTxHash(f, s); err == nil {
			return h
		}
	}
	v.Add(field, "must be an EVM transaction hash (64 hex characters, optional 0x prefix) or a Solana signature")
	return ""
}

func (s *Server) getTransaction(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	t, err := s.Store.Transaction(c.Request.Context(), principal(c).Scope(), id)
	if err != nil {
		fail(c, err)
		return
	}
	out, err := s.transactionsOut(c.Request.Context(), t)
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, out[0])
}
