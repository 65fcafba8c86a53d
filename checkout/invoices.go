package checkout

import (
	"context"
	"errors"
	"fmt"

	"github.com/paygate/paygate/activities"
	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/workflows"
)

// Invoice sessions: the checkout sessions that pay a subscription's
// invoices. They are ordinary sessions (payment reference, hosted page,
// CheckoutSessionWorkflow, events) on the link that prices the
// subscription; they carry the subscription's id, so their outcome is
// signalled to its workflow. Service implements activities.InvoiceSessions.

// OpenInvoiceSession creates the session of an invoice (once per id: a
// retried activity finds the one it created) and starts its workflow. The
// amount is the subscription's price, without tax; the payer is the
// subscription's customer wallet.
func (s *Service) OpenInvoiceSession(ctx context.Context, req activities.InvoiceSessionRequest) (activities.InvoiceSession, error) {
	sub, err := s.Store.SubscriptionByID(ctx, req.SubscriptionID)
	if err != nil {
		return activities.InvoiceSession{}, err
	}
	// A retry of an attempt that created the session finds it, whatever
	// changed since (the network removed, the wallet proven by another):
	// it exists, and its workflow must start.
	if prior, err := s.Store.CheckoutSession(ctx, req.SessionID); err == nil {
		return s.invoiceSession(ctx, prior, sub.ID)
	} else if !errors.Is(err, apperr.ErrNotFound) {
		return activities.InvoiceSession{}, err
	}
	net, ok := s.Networks.Lookup(sub.Network)
	if !ok {
		return activities.InvoiceSession{}, apperr.Invalid("network", sub.Network+" is not configured on this server")
	}
	// A wallet another merchant proved after the subscription was made is
	// that merchant's, and one the merchant proved since as a contract
	// wallet on other networks only may not be the merchant's on this one:
	// no new session pays it.
	bar, on, err := s.Store.WalletBar(ctx, sub.MerchantWalletAddress, sub.Network, sub.MerchantID)
	if err != nil {
		return activities.InvoiceSession{}, err
	}
	switch bar {
	case models.WalletProvenByOther:
		return activities.InvoiceSession{}, apperr.New(apperr.ErrBadRequest, "the receiving wallet "+sub.MerchantWalletAddress+
			" is proven by another merchant account, so no renewal is paid to it: prove it on this account if it is yours, or cancel the subscription")
	case models.WalletContractElsewhere:
		return activities.InvoiceSession{}, apperr.New(apperr.ErrBadRequest, "the receiving wallet "+sub.MerchantWalletAddress+" is "+
			models.ContractElsewhereReason(sub.Network, on)+", so no renewal is paid to it: prove it on "+sub.Network+", or cancel the subscription")
	}
	link, err := s.Store.SubscriptionLink(ctx, sub.ID)
	if err != nil {
		return activities.InvoiceSession{}, err
	}
	ref, err := NewPaymentReference(net.Family)
	if err != nil {
		return activities.InvoiceSession{}, err
	}
	cs := &models.CheckoutSession{ID: req.SessionID, SubscriptionID: &sub.ID, PaymentReference: &ref, MerchantID: sub.MerchantID,
		Mode: sub.Mode, PaymentLinkID: link.ID, WalletAddress: sub.CustomerWalletAddress, WalletType: string(net.Family),
		Network: sub.Network, Subtotal: sub.Amount, ExpectedAmount: sub.Amount, CustomerEmail: sub.CustomerEmail,
		MerchantWalletAddress: sub.MerchantWalletAddress, TokenAddress: net.USDC, ExpiresAt: req.ExpiresAt.UTC(), InvoiceNumber: req.Invoice}
	got, _, err := s.Store.CreateInvoiceSession(ctx, cs)
	if err != nil {
		return activities.InvoiceSession{}, err
	}
	return s.invoiceSession(ctx, got, sub.ID)
}

// invoiceSession answers the session cs of subscription subID (created now,
// or by an earlier attempt), its workflow started if it was not.
func (s *Service) invoiceSession(ctx context.Context, cs *models.CheckoutSession, subID string) (activities.InvoiceSession, error) {
	if cs.SubscriptionID == nil || *cs.SubscriptionID != subID {
		return activities.InvoiceSession{}, fmt.Errorf("session %s exists and is not an invoice of subscription %s", cs.ID, subID)
	}
	if err := s.ensureWorkflow(ctx, cs); err != nil {
		// The repairer starts it shortly; the session exists and can be paid.
		s.log().WarnContext(ctx, "invoice session's workflow not started; the repairer will start it", "sessionId", cs.ID, "err", err)
	}
	return activities.InvoiceSession{SessionID: cs.ID, Status: cs.Status, ExpiresAt: cs.ExpiresAt}, nil
}

// InvoiceSessionStatus reads a session's status from the read model.
func (s *Service) InvoiceSessionStatus(ctx context.Context, sessionID string) (string, error) {
	cs, err := s.Store.CheckoutSession(ctx, sessionID)
	if err != nil {
		return "", err
	}
	return cs.Status, nil
}

// errEnding: the session is past its expiry and its outcome is not stored
// yet. Its workflow may have taken a customer's hash an instant before
// the expiry (the hash reaches the row a moment later) or be expiring it:
// the subscription asks again (a dunning end holds for it) instead of
// taking it as expired and cancelling a customer whose payment is on its
// way.
var errEnding = apperr.Conflict("the session is ending and its outcome is not recorded yet")

// VoidInvoiceSession cancels an invoice's session that has no broadcast
// transfer (its workflow records the cancellation) and answers the status
// it has then. A session with a broadcast transfer is a conflict: the
// customer's money has moved and the chain decides.
func (s *Service) VoidInvoiceSession(ctx context.Context, sessionID string) (string, error) {
	cs, err := s.Store.CheckoutSession(ctx, sessionID)
	if err != nil {
		return "", err
	}
	switch {
	case models.TerminalStatus(cs.Status):
		return cs.Status, nil
	case cs.TxHash != nil:
		return cs.Status, apperr.Conflict("a payment of this session is being confirmed")
	case !s.now().Before(cs.ExpiresAt):
		return cs.Status, errEnding
	}
	cur, err := s.Cancel(ctx, cs, workflows.CancelByMerchant)
	if errors.Is(err, apperr.ErrNotFound) {
		// Expired meanwhile (or its workflow is gone): the store says
		// which once its workflow has recorded it.
		if now, lerr := s.Store.CheckoutSession(ctx, sessionID); lerr == nil && models.TerminalStatus(now.Status) {
			return now.Status, nil
		}
		return cs.Status, errEnding
	}
	if err != nil {
		if errors.Is(err, apperr.ErrConflict) {
			// Broadcast meanwhile, or ended: say which.
			if now, lerr := s.Store.CheckoutSession(ctx, sessionID); lerr == nil && models.TerminalStatus(now.Status) {
				return now.Status, nil
			}
		}
		return cs.Status, err
	}
	return cur.Status, nil
}
