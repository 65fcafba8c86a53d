package models

import (
	"context"
	"errors"
	"time"

	"github.com/paygate/paygate/apperr"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// EventPaymentException is emitted when money reaches a merchant wallet
// without paying a session (a payment exception is opened or becomes
// contested).
const EventPaymentException = "payment.exception"

// SourceException marks a transaction created by resolving an exception.
const SourceException = "exception"

// upsertException opens the exception of a transfer, or adds to the one
// that exists for the same merchant, network and hash (more sessions; a
// contest overrides the earlier kind). It returns the stored exception and
// the event to emit when something a merchant must see happened.
func (s *Store) upsertException(tx *gorm.DB, e *PaymentException, at time.Time) (*PaymentException, *EventSpec, error) {
	e.ID, e.Status, e.CreatedAt, e.UpdatedAt = NewID(), ExceptionOpen, at, at
	if e.SessionIDs == nil {
		e.SessionIDs = StringList{}
	}
	res := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(e)
	if res.Error != nil {
		return nil, nil, res.Error
	}
	if res.RowsAffected == 1 {
		return e, exceptionEvent(e), nil
	}
	var cur PaymentException
	if err := tx.Where("merchant_id = ? AND network = ? AND tx_hash = ?", e.MerchantID, e.Network, e.TxHash).Take(&cur).Error; err != nil {
		return nil, nil, err
	}
	ids := append(StringList{}, cur.SessionIDs...)
	for _, id := range e.SessionIDs {
		if !containsString(ids, id) {
			ids = append(ids, id)
		}
	}
	fields := map[string]any{"session_ids": ids, "updated_at": at}
	escalate := e.Kind == ExceptionContested && cur.Kind != ExceptionContested && cur.Status == ExceptionOpen
	q := tx.Model(&PaymentException{}).Where("id = ?", cur.ID)
	if escalate {
		fields["kind"], fields["message"] = e.Kind, e.Message
		// Only while it is open: one resolved or dismissed meanwhile (a
		// concurrent transaction, PostgreSQL's read committed) stays so.
		q = q.Where("status = ?", ExceptionOpen)
	}
	res = q.Updates(fields)
	if res.Error != nil {
		return nil, nil, res.Error
	}
	if escalate && res.RowsAffected == 0 {
		return &cur, nil, nil
	}
	cur.SessionIDs = ids
	if escalate {
		cur.Kind, cur.Message = e.Kind, e.Message
		return &cur, exceptionEvent(&cur), nil
	}
	return &cur, nil, nil
}

func containsString(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// exceptionEvent is the payment.exception event of an exception's kind.
func exceptionEvent(e *PaymentException) *EventSpec {
	return &EventSpec{Type: EventPaymentException, Key: EventPaymentException + ":" + e.ID + ":" + e.Kind, Data: ExceptionEventData(e)}
}

// ExceptionEventData is the payload of payment.exception.
func ExceptionEventData(e *PaymentException) map[string]any {
	return map[string]any{"exceptionId": e.ID, "kind": e.Kind, "status": e.Status, "txHash": e.TxHash, "network": e.Network,
		"amount": e.Amount.String(), "expectedAmount": e.ExpectedAmount.String(), "payerAddress": e.PayerAddress,
		"merchantWalletAddress": e.MerchantWalletAddress, "sessionIds": []string(e.SessionIDs), "message": e.Message,
		"livemode": e.Mode == ModeLive}
}

// OpenException records a transfer found on chain that pays no session
// (late or unmatched) and returns the ids of the deliveries of its event.
func (s *Store) OpenException(ctx context.Context, e *PaymentException) ([]string, error) {
	var ids []string
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		var n int64
		if err := tx.Model(&Transaction{}).Where("merchant_id = ? AND network = ? AND tx_hash = ? AND verification <> ?",
			e.MerchantID, e.Network, e.TxHash, VerificationFailed).Count(&n).Error; err != nil || n > 0 {
			return err // already accounted for (a refuted record accounts for nothing)
		}
		_, ev, err := s.upsertException(tx, e, s.Now())
		if err != nil || ev == nil {
			return err
		}
		ids, err = s.emitEvent(tx, e.MerchantID, e.Mode, *ev, s.Now())
		return err
	})
	return ids, err
}

// ExceptionFilter narrows the exception list; empty fields do not filter.
type ExceptionFilter struct {
	Status, Kind, Network, TxHash string
}

// PaymentExceptions lists a page of the scope's exceptions, newest first.
func (s *Store) PaymentExceptions(ctx context.Context, sc Scope, f ExceptionFilter, p Page) ([]PaymentException, bool, error) {
	q := equal(s.scoped(ctx, sc), "status", f.Status, "kind", f.Kind, "network", f.Network, "tx_hash", f.TxHash)
	return fetchPage[PaymentException](q, p)
}

// PaymentExceptionOf loads one of the scope's exceptions.
func (s *Store) PaymentExceptionOf(ctx context.Context, sc Scope, id string) (*PaymentException, error) {
	var e PaymentException
	err := s.scoped(ctx, sc).Where("id = ?", id).Take(&e).Error
	return &e, notFound(err)
}

// Resolution attaches an exception's transfer to a session or a customer.
type Resolution struct {
	// SessionID is the session the money paid (one of the scope's; it must
	// not have a transaction yet).
	SessionID string
	// SubscriptionID is the subscription whose open invoice (number
	// SubscriptionInvoice) the money pays (ResolveExceptionForInvoice): the
	// transaction goes to its customer.
	SubscriptionID      string
	SubscriptionInvoice int
	CustomerEmail       string
	CustomerName        string
	Note                string
}

// ResolveException turns an open exception into a transaction of the
// merchant (verified: the chain showed it), attached to the session or the
// customer given, and emits payment.completed for it. It returns the
// transaction and the deliveries to dispatch.
func (s *Store) ResolveException(ctx context.Context, sc Scope, id string, r Resolution) (*PaymentException, *Transaction, []string, error) {
	var exc PaymentException
	var txn *Transaction
	var ids []string
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Where("id = ? AND merchant_id = ? AND mode = ?", id, sc.MerchantID, sc.Mode).Take(&exc).Error; err != nil {
			return notFound(err)
		}
		if exc.Status != ExceptionOpen {
			return apperr.Conflict("the payment exception is already " + exc.Status)
		}
		if exc.Amount <= 0 {
			return apperr.Invalid("id", "the payment exception has no amount to record")
		}
		now := s.Now()
		t := &Transaction{ID: NewID(), MerchantID: sc.MerchantID, Mode: sc.Mode, Amount: exc.Amount, Token: "USDC", Network: exc.Network,
			TxHash: exc.TxHash, Status: "completed", Verification: VerificationVerified, WalletAddress: exc.PayerAddress,
			MerchantWalletAddress: exc.MerchantWalletAddress, CustomerEmail: r.CustomerEmail, CustomerName: r.CustomerName,
			Source: SourceException, CreatedAt: now}
		country := "" // the customer's, when a session's customer pays
		if r.SubscriptionID != "" {
			var sub Subscription
			if err := tx.Where("id = ? AND merchant_id = ? AND mode = ?", r.SubscriptionID, sc.MerchantID, sc.Mode).Take(&sub).Error; err != nil {
				if errors.Is(err, gorm.ErrRecordNotFound) {
					return apperr.Invalid("subscriptionId", "no such subscription")
				}
				return err
			}
			if sub.Network != exc.Network {
				return apperr.Invalid("subscriptionId", "the subscription bills on "+sub.Network+", the transfer was on "+exc.Network)
			}
			if t.CustomerEmail == "" {
				t.CustomerEmail = sub.CustomerEmail
			}
		}
		if r.SessionID != "" {
			var cs CheckoutSession
			if err := tx.Where("id = ? AND merchant_id = ? AND mode = ?", r.SessionID, sc.MerchantID, sc.Mode).Take(&cs).Error; err != nil {
				if errors.Is(err, gorm.ErrRecordNotFound) {
					return apperr.Invalid("sessionId", "no such checkout session")
				}
				return err
			}
			if cs.Network != exc.Network {
				return apperr.Invalid("sessionId", "the checkout session is on another network")
			}
			if cs.SubscriptionID != nil {
				// Attached there, the money would be recorded while the
				// subscription, which renews only on its session's own
				// payment, went on to past_due and was canceled unpaid.
				return apperr.Invalid("sessionId", "is the invoice session of subscription "+*cs.SubscriptionID+
					": a payment attached to it does not renew the subscription; resolve the exception to the customer "+
					"(customerEmail) and refund it, or let the customer pay the open invoice")
			}
			if !TerminalStatus(cs.Status) {
				// Its own payment may still complete it: the session would
				// then take this transaction as its own, and the customer's
				// transfer would go unrecorded. Ended sessions never change.
				return apperr.Conflict("the checkout session is still " + cs.Status + "; attach the payment once it has ended")
			}
			var n int64
			if err := tx.Model(&Transaction{}).Where("session_id = ?", cs.ID).Count(&n).Error; err != nil {
				return err
			}
			if n > 0 {
				return apperr.Conflict("the checkout session already has a transaction")
			}
			t.SessionID, t.PaymentLinkID = &cs.ID, &cs.PaymentLinkID
			if t.CustomerEmail == "" {
				t.CustomerEmail, t.CustomerName = cs.CustomerEmail, cs.CustomerName
			}
			if t.CustomerEmail == cs.CustomerEmail {
				country = cs.CustomerCountry
			}
		}
		if err := dropRefutedRecord(tx, t); err != nil {
			return err
		}
		if err := s.applyTransaction(tx, t, country); err != nil {
			return err
		}
		// Conditional: a dismiss (or another resolve) that committed since
		// the read above wins, and this one rolls back (PostgreSQL reads
		// committed rows; SQLite serialises writers anyway).
		fields := map[string]any{"status": ExceptionResolved, "transaction_id": t.ID, "note": truncate(r.Note, 500), "resolved_at": now, "updated_at": now}
		if r.SubscriptionID != "" {
			fields["subscription_id"], fields["subscription_invoice"] = r.SubscriptionID, r.SubscriptionInvoice
			exc.SubscriptionID, exc.SubscriptionInvoice = &r.SubscriptionID, r.SubscriptionInvoice
		}
		res := tx.Model(&PaymentException{}).Where("id = ? AND status = ?", exc.ID, ExceptionOpen).Updates(fields)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return apperr.Conflict("the payment exception was closed meanwhile")
		}
		exc.Status, exc.TransactionID, exc.Note, exc.ResolvedAt = ExceptionResolved, &t.ID, r.Note, &now
		data := map[string]any{"transactionId": t.ID, "exceptionId": exc.ID, "sessionId": t.SessionID, "paymentLinkId": t.PaymentLinkID,
			"subscriptionId": exc.SubscriptionID,
			"customerId":     t.CustomerID, "customerEmail": t.CustomerEmail, "txHash": t.TxHash, "walletAddress": t.WalletAddress,
			"merchantWalletAddress": t.MerchantWalletAddress, "amount": t.Amount.String(), "token": t.Token, "network": t.Network,
			"livemode": sc.Mode == ModeLive}
		var err error
		ids, err = s.emitEvent(tx, sc.MerchantID, sc.Mode, EventSpec{Type: "payment.completed", Key: "payment.completed:exception:" + exc.ID, Data: data}, now)
		txn = t
		return err
	})
	return &exc, txn, ids, err
}

// ResolveExceptionForInvoice records an open exception's transfer as the
// payment of invoice number `invoice` of a subscription (the subscription's
// workflow asks, having voided the invoice's sessions): a transaction of the
// subscription's customer, payment.completed naming the subscription, as
// ResolveException does. Asked again for the same invoice (a retried
// activity), it answers what was recorded, with no new deliveries; for
// another invoice, even of the same subscription, it is a conflict (one
// transfer never pays two periods).
func (s *Store) ResolveExceptionForInvoice(ctx context.Context, sc Scope, id, subscriptionID string, invoice int, note string) (*PaymentException, *Transaction, []string, error) {
	exc, err := s.PaymentExceptionOf(ctx, sc, id)
	if err != nil {
		return nil, nil, nil, err
	}
	if exc.Status == ExceptionResolved && exc.SubscriptionID != nil && *exc.SubscriptionID == subscriptionID &&
		exc.SubscriptionInvoice == invoice && exc.TransactionID != nil {
		t, err := s.Transaction(ctx, sc, *exc.TransactionID)
		return exc, t, nil, err
	}
	return s.ResolveException(ctx, sc, id, Resolution{SubscriptionID: subscriptionID, SubscriptionInvoice: invoice, Note: note})
}

// DismissException closes an open exception without a transaction (the
// merchant refunded it, or it is not a payment).
func (s *Store) DismissException(ctx context.Context, sc Scope, id, note string) (*PaymentException, error) {
	var exc PaymentException
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Where("id = ? AND merchant_id = ? AND mode = ?", id, sc.MerchantID, sc.Mode).Take(&exc).Error; err != nil {
			return notFound(err)
		}
		if exc.Status != ExceptionOpen {
			return apperr.Conflict("the payment exception is already " + exc.Status)
		}
		now := s.Now()
		exc.Status, exc.Note, exc.ResolvedAt, exc.UpdatedAt = ExceptionDismissed, truncate(note, 500), &now, now
		res := tx.Model(&PaymentException{}).Where("id = ? AND status = ?", exc.ID, ExceptionOpen).Updates(map[string]any{
			"status": exc.Status, "note": exc.Note, "resolved_at": now, "updated_at": now})
		if res.Error == nil && res.RowsAffected == 0 {
			return apperr.Conflict("the payment exception was closed meanwhile")
		}
		return res.Error
	})
	return &exc, err
}

// ReceivingWallet is a wallet a merchant receives payments at on a network.
type ReceivingWallet struct {
	Address    string
	MerchantID string
	Mode       Mode
}

// ReceivingWallets lists the wallets the merchants' live payment links
// receive at on a network (the scan for unmatched transfers watches them).
// A wallet a merchant proved (WalletProof) is listed for its provers alone:
// its transfers are theirs, not those of another merchant whose link named
// it (before the proof, or by mistake).
func (s *Store) ReceivingWallets(ctx context.Context, network string, mode Mode) ([]ReceivingWallet, error) {
	var links []PaymentLink
	if err := s.ctx(ctx).Select("merchant_id", "mode", "wallet_addresses").Where("mode = ?", mode).Find(&links).Error; err != nil {
		return nil, err
	}
	seen := map[ReceivingWallet]bool{}
	named := map[string]bool{}
	var out []ReceivingWallet
	var addrs []string
	for _, l := range links {
		addr := l.WalletAddresses[network]
		w := ReceivingWallet{Address: addr, MerchantID: l.MerchantID, Mode: l.Mode}
		if addr == "" || seen[w] {
			continue
		}
		seen[w] = true
		if !named[addr] {
			named[addr] = true
			addrs = append(addrs, addr)
		}
		out = append(out, w)
	}
	provers, err := s.WalletProvers(ctx, addrs)
	if err != nil {
		return nil, err
	}
	kept := out[:0]
	for _, w := range out {
		if p := provers.On(w.Address, network); len(p) == 0 || p[w.MerchantID] {
			kept = append(kept, w)
		}
	}
	return kept, nil
}

// TransferAccountedFor reports whether a merchant's session, transaction
// or exception already holds a hash: then it is no unmatched transfer.
func (s *Store) TransferAccountedFor(ctx context.Context, merchantID, network, txHash string) (bool, error) {
	return s.transferHeld(ctx, merchantID, network, txHash, false)
}

// TransferSettled reports whether a hash backs a transaction of the
// merchant or a session that completed with it. A claim alone proves
// nothing (anyone may submit any hash to a session declaring the sender,
// and an exception is the merchant's to attach): the session an unproven
// transfer would pay still claims it beside them, and the store contests
// it.
func (s *Store) TransferSettled(ctx context.Context, merchantID, network, txHash string) (bool, error) {
	return s.transferHeld(ctx, merchantID, network, txHash, true)
}

func (s *Store) transferHeld(ctx context.Context, merchantID, network, txHash string, settled bool) (bool, error) {
	sessions := s.ctx(ctx).Model(&CheckoutSession{})
	if settled {
		sessions = sessions.Where("status = ?", StatusComplete)
	} else {
		// A failed session holds no money: one that received some keeps
		// it as an exception (counted below), and one that failed with
		// its hash unseen (TX_NOT_FOUND) has received nothing. A transfer
		// of that hash mined later (a dropped transaction broadcast
		// again) is the merchant's money with no record: unmatched.
		sessions = sessions.Where("status <> ?", StatusFailed)
	}
	// A record the chain refuted backs nothing (the USDC it claimed is
	// not what reached the wallet, if any did).
	records := s.ctx(ctx).Model(&Transaction{}).Where("verification <> ?", VerificationFailed)
	queries := []*gorm.DB{sessions, records}
	if !settled {
		queries = append(queries, s.ctx(ctx).Model(&PaymentException{}))
	}
	for _, q := range queries {
		var n int64
		if err := q.Where("merchant_id = ? AND network = ? AND tx_hash = ?", merchantID, network, txHash).Count(&n).Error; err != nil {
			return false, err
		}
		if n > 0 {
			return true, nil
		}
	}
	return false, nil
}
