package models

import (
	"context"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/money"
	"gorm.io/gorm"
)

// Payment kinds (Payment.Kind).
const (
	// PaymentCheckout is a checkout session, with its transaction once paid.
	PaymentCheckout = "checkout"
	// PaymentRecord is a transaction the merchant recorded outside checkout
	// (POST /api/transactions) or a resolved exception's transaction.
	PaymentRecord = "record"
)

// PaymentOpen is the status filter that matches every session still in
// progress (created, wallet steps, broadcast, confirming).
const PaymentOpen = "open"

// Payment is one row of the merchant's payments: a checkout session, or a
// transaction without a session. Ids are UUIDv7 in both tables, so one
// cursor pages through both, newest first.
type Payment struct {
	ID              string
	Kind            string
	Status          string // a session status; "complete" for a record ("failed" once the chain refuted it)
	Verification    string // a record's (VerificationPending, …); "" for a session
	Amount          money.Amount
	Token           string
	Network         string
	PaymentLinkID   *string
	PaymentLinkName string
	TxHash          *string
	WalletAddress   string
	CustomerEmail   string
	CustomerName    string
	SessionID       *string
	TransactionID   *string
	FailureReason   string
	CreatedAt       time.Time
}

// PaymentFilter narrows the payments list; empty fields do not filter.
type PaymentFilter struct {
	// Status is PaymentOpen or a session status (StatusComplete matches
	// records too, StatusFailed records the chain refuted).
	Status        string
	Network       string
	PaymentLinkID string
	Since, Until  *time.Time
	// Search matches part of the transaction hash, the payer's wallet or
	// the customer's e-mail, ignoring case.
	Search string
	// CustomerEmail matches the customer's e-mail exactly, ignoring case.
	CustomerEmail string
	// CustomerID matches a customer's payments: its transactions (whatever
	// e-mail they were paid under: a customer's e-mail can change) and the
	// sessions opened under its current e-mail that no other customer (or
	// none) paid.
	CustomerID string
}

var terminalStatuses = []string{StatusComplete, StatusFailed, StatusCancelled, StatusExpired}

// likeContains is a LIKE pattern matching s anywhere, with LIKE's own
// characters escaped (by backslash: ESCAPE '\').
func likeContains(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return "%" + r.Replace(strings.ToLower(s)) + "%"
}

func searchPayments(q *gorm.DB, f PaymentFilter) *gorm.DB {
	if f.CustomerEmail != "" {
		q = q.Where("lower(customer_email) = ?", strings.ToLower(f.CustomerEmail))
	}
	search := f.Search
	if search == "" {
		return q
	}
	p := likeContains(search)
	return q.Where(`(lower(tx_hash) LIKE ? ESCAPE '\' OR lower(wallet_address) LIKE ? ESCAPE '\' OR lower(customer_email) LIKE ? ESCAPE '\')`, p, p, p)
}

// Payments lists a page of the scope's payments, newest first: checkout
// sessions and the transactions that have no session.
func (s *Store) Payments(ctx context.Context, sc Scope, f PaymentFilter, p Page) ([]Payment, bool, error) {
	var out []Payment
	var customer *Customer
	if f.CustomerID != "" {
		c, err := s.Customer(ctx, sc, f.CustomerID)
		if isNotFound(err) {
			return nil, false, nil // no such customer of the scope: none of its payments
		}
		if err != nil {
			return nil, false, err
		}
		customer = c
	}
	// Sessions.
	q := equal(s.scoped(ctx, sc).Model(&CheckoutSession{}), "network", f.Network, "payment_link_id", f.PaymentLinkID)
	if customer != nil {
		paid := s.ctx(ctx).Model(&Transaction{}).Select("session_id").Where("customer_id = ? AND session_id IS NOT NULL", customer.ID)
		// Sessions under its current e-mail, but not those paid by another
		// customer (its e-mail was this one's before a change).
		q = q.Where(`((lower(customer_email) = ? AND NOT EXISTS (SELECT 1 FROM transactions t
			WHERE t.session_id = checkout_sessions.id AND COALESCE(t.customer_id, '') <> ?)) OR id IN (?))`, strings.ToLower(customer.Email), customer.ID, paid)
	}
	switch f.Status {
	case "":
	case PaymentOpen:
		q = q.Where("status NOT IN ?", terminalStatuses)
	default:
		q = q.Where("status = ?", f.Status)
	}
	// Each table gives up to limit+1 rows; the merge is cut to the page.
	var sessions []CheckoutSession
	if err := paginate(searchPayments(createdBetween(q, f.Since, f.Until), f), p).Find(&sessions).Error; err != nil {
		return nil, false, err
	}
	sessionIDs := make([]string, 0, len(sessions))
	for i := range sessions {
		cs := &sessions[i]
		link := cs.PaymentLinkID
		out = append(out, Payment{ID: cs.ID, Kind: PaymentCheckout, Status: cs.Status, Amount: cs.ExpectedAmount, Token: "USDC",
			Network: cs.Network, PaymentLinkID: &link, TxHash: cs.TxHash, WalletAddress: cs.WalletAddress, CustomerEmail: cs.CustomerEmail,
			CustomerName: cs.CustomerName, SessionID: &sessions[i].ID, FailureReason: cs.FailureReason, CreatedAt: cs.CreatedAt})
		sessionIDs = append(sessionIDs, cs.ID)
	}
	// Records: transactions without a session; complete, or failed when
	// the chain refuted them (recordPayment).
	if f.Status == "" || f.Status == StatusComplete || f.Status == StatusFailed {
		q := equal(s.scoped(ctx, sc).Model(&Transaction{}), "network", f.Network, "payment_link_id", f.PaymentLinkID).
			Where("session_id IS NULL")
		if customer != nil {
			q = q.Where("customer_id = ?", customer.ID)
		}
		switch f.Status {
		case StatusComplete:
			q = q.Where("verification <> ?", VerificationFailed)
		case StatusFailed:
			q = q.Where("verification = ?", VerificationFailed)
		}
		var records []Transaction
		if err := paginate(searchPayments(createdBetween(q, f.Since, f.Until), f), p).Find(&records).Error; err != nil {
			return nil, false, err
		}
		for i := range records {
			out = append(out, recordPayment(&records[i]))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID > out[j].ID })
	out, more := trimPage(out, p)
	if err := s.fillPayments(ctx, out, sessionIDs); err != nil {
		return nil, false, err
	}
	return out, more, nil
}

// recordPayment is the payment of a transaction without a session: complete
// (its Verification says whether the chain bore it out yet), or failed when
// the chain refuted it (the transaction's VerificationMessage says why).
func recordPayment(t *Transaction) Payment {
	hash := t.TxHash
	p := Payment{ID: t.ID, Kind: PaymentRecord, Status: StatusComplete, Verification: t.Verification, Amount: t.Amount, Token: t.Token,
		Network: t.Network, PaymentLinkID: t.PaymentLinkID, TxHash: &hash, WalletAddress: t.WalletAddress,
		CustomerEmail: t.CustomerEmail, CustomerName: t.CustomerName, TransactionID: &t.ID, CreatedAt: t.CreatedAt}
	if t.Verification == VerificationFailed {
		p.Status = StatusFailed
	}
	return p
}

// fillPayments adds the sessions' transactions and the links' names.
func (s *Store) fillPayments(ctx context.Context, out []Payment, sessionIDs []string) error {
	if len(out) == 0 {
		return nil
	}
	if len(sessionIDs) > 0 {
		var txs []Transaction
		if err := s.ctx(ctx).Select("id", "session_id").Where("session_id IN ?", sessionIDs).Find(&txs).Error; err != nil {
			return err
		}
		bySession := map[string]string{}
		for _, t := range txs {
			if t.SessionID != nil {
				bySession[*t.SessionID] = t.ID
			}
		}
		for i := range out {
			if out[i].SessionID != nil {
				if id, ok := bySession[*out[i].SessionID]; ok {
					out[i].TransactionID = &id
				}
			}
		}
	}
	var linkIDs []string
	for _, p := range out {
		if p.PaymentLinkID != nil {
			linkIDs = append(linkIDs, *p.PaymentLinkID)
		}
	}
	if len(linkIDs) == 0 {
		return nil
	}
	var links []PaymentLink
	// Deleted links still name their payments.
	if err := s.ctx(ctx).Unscoped().Select("id", "name", "token").Where("id IN ?", linkIDs).Find(&links).Error; err != nil {
		return err
	}
	names := map[string]PaymentLink{}
	for _, l := range links {
		names[l.ID] = l
	}
	for i := range out {
		if out[i].PaymentLinkID != nil {
			if l, ok := names[*out[i].PaymentLinkID]; ok {
				out[i].PaymentLinkName = l.Name
				if out[i].Kind == PaymentCheckout && l.Token != "" {
					out[i].Token = l.Token
				}
			}
		}
	}
	return nil
}

// PaymentDetail is one payment with what explains it: the session and its
// history (checkouts) and the transaction (once paid, or the record).
type PaymentDetail struct {
	Payment     Payment
	Session     *CheckoutSession
	History     []CheckoutSessionEvent
	Transaction *Transaction
}

// PaymentOf finds a payment of the scope by its id: a session's, or a
// transaction's (a session's transaction leads to its session).
func (s *Store) PaymentOf(ctx context.Context, sc Scope, id string) (*PaymentDetail, error) {
	cs, err := s.CheckoutSessionOfMerchant(ctx, sc, id)
	if err != nil && !isNotFound(err) {
		return nil, err
	}
	if err != nil {
		t, terr := s.Transaction(ctx, sc, id)
		if terr != nil {
			return nil, terr
		}
		if t.SessionID == nil {
			d := &PaymentDetail{Transaction: t}
			ps := []Payment{recordPayment(t)}
			if err := s.fillPayments(ctx, ps, nil); err != nil {
				return nil, err
			}
			d.Payment = ps[0]
			return d, nil
		}
		if cs, err = s.CheckoutSessionOfMerchant(ctx, sc, *t.SessionID); err != nil {
			return nil, err
		}
	}
	d := &PaymentDetail{Session: cs}
	if d.History, err = s.SessionHistory(ctx, cs.ID); err != nil {
		return nil, err
	}
	var t Transaction
	switch err := s.scoped(ctx, sc).Where("session_id = ?", cs.ID).Take(&t).Error; {
	case err == nil:
		d.Transaction = &t
	case !errors.Is(err, gorm.ErrRecordNotFound):
		return nil, err
	}
	link := cs.PaymentLinkID
	d.Payment = Payment{ID: cs.ID, Kind: PaymentCheckout, Status: cs.Status, Amount: cs.ExpectedAmount, Token: "USDC",
		Network: cs.Network, PaymentLinkID: &link, TxHash: cs.TxHash, WalletAddress: cs.WalletAddress, CustomerEmail: cs.CustomerEmail,
		CustomerName: cs.CustomerName, SessionID: &cs.ID, FailureReason: cs.FailureReason, CreatedAt: cs.CreatedAt}
	ps := []Payment{d.Payment}
	if err := s.fillPayments(ctx, ps, []string{cs.ID}); err != nil {
		return nil, err
	}
	d.Payment = ps[0]
	return d, nil
}

func isNotFound(err error) bool { return errors.Is(err, apperr.ErrNotFound) }
