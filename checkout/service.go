package checkout

import (
	"context"
	"errors"
	"fmt"
	"github.com/paygate/paygate/periodic"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/auth"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/money"
	"github.com/paygate/paygate/workflows"
)

// Service runs checkouts.
type Service struct {
	Store     *models.Store
	Temporal  client.Client
	Hasher    *auth.Hasher
	Networks  *chain.Registry
	Tax       TaxProvider
	TaskQueue string
	// Lifetime of a session without a submitted hash (SPEC.md: 30 minutes).
	Lifetime time.Duration
	// NotFoundWindow: how long a submitted hash may stay unseen on chain.
	NotFoundWindow time.Duration
	// UpdateTimeout bounds how long a submit, a wallet report or a cancel
	// waits for the session's workflow to answer (0: DefaultUpdateTimeout).
	// With the workers down the workflow cannot answer: the caller gets a
	// 503 with Retry-After instead of a request that hangs.
	UpdateTimeout time.Duration
	// ReconcileGrace is how long past its due end a session may stay open
	// before the repairer checks its workflow (0: a minute; negative: none).
	ReconcileGrace time.Duration
	Log            *slog.Logger
	// Now is the clock (tests); nil is time.Now.
	Now func() time.Time
	// Relayer broadcasts customers' signed EIP-3009 authorizations (nil or
	// a network without a key: the customer's wallet broadcasts).
	Relayer *chain.Relayer
	// Finder finds payments by their session's reference (worker side).
	Finder chain.ReferenceFinder
	// Verifier checks recorded transactions and late payments on chain
	// (worker side).
	Verifier chain.Verifier
	// LateGrace is how long after a session's end a payment bound to it is
	// still looked for (and kept as a late-payment exception); 0 is 24 h.
	LateGrace time.Duration
	// UnmatchedGrace is how long a transfer to a merchant wallet may stay
	// unaccounted for before it is an unmatched-payment exception; 0 is 10
	// minutes.
	UnmatchedGrace time.Duration

	watchMu         sync.Mutex
	cursors         map[string]uint64
	transferCursors map[string]uint64
	candidates      map[string]unmatchedCandidate
	walletCache     map[string]walletCacheEntry
	knownWallets    map[string]map[string]bool
	// retryFound: payments found by reference that a pass could not
	// settle; declined: found transfers that do not pay their session
	// (session id/hash), not verified again.
	retryFound map[string][]chain.Found
	declined   map[string]time.Time
	// lateWaits: when a payment found for an ended session was first
	// found not final (network/hash): it is looked at again for
	// lateWaitFor at most (one reorged away for good is never final).
	lateWaits map[string]time.Time
	// positionsSaved: when each network's positions (persistPositions)
	// were last stored.
	positionsSaved map[string]time.Time
	// walletSigs: per Solana network, the newest signature of each
	// merchant wallet's USDC account the wallet scan has read (its place;
	// stored, see persistPositions).
	walletSigs map[string]map[string]string
	// pass counts the watcher's passes. positions keeps, per stored
	// position (a cursor, a wallet's place), the values it took and the
	// pass of each; parked, per network, when each parked payment
	// (retryFound) was first parked; persisted what was stored last.
	pass      uint64
	positions map[string][]position
	parked    map[string]map[string]heldRead
	persisted map[string]string
	// recordsAfter is where VerifyRecordsOnce goes on (a record's id).
	recordsAfter string

	// marks are new sessions whose workflow started, to be marked in the
	// store (markLater); marking is set while a writer goroutine runs.
	marksMu sync.Mutex
	marks   []string
	marking bool
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now().UTC()
	}
	return time.Now().UTC()
}

func (s *Service) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

// payableLink loads a link a customer may pay: deleted is 404, inactive
// 400. Quote and create need only the link (merchants are never deleted),
// so they skip openLink's merchant read: one query less per call.
func (s *Service) payableLink(ctx context.Context, id string) (*models.PaymentLink, error) {
	l, err := s.Store.PaymentLinkByID(ctx, id)
	if err != nil {
		return nil, err
	}
	if !l.Active {
		return nil, apperr.Invalid("linkId", "the payment link is not active")
	}
	if l.ExpiresAt != nil && !s.now().Before(*l.ExpiresAt) {
		return nil, apperr.Invalid("linkId", "the checkout has expired")
	}
	return l, nil
}

// openLink is payableLink with the link's merchant (the page shows it).
func (s *Service) openLink(ctx context.Context, id string) (*models.PaymentLink, *models.Merchant, error) {
	l, err := s.payableLink(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	m, err := s.Store.Merchant(ctx, l.MerchantID)
	if err != nil {
		return nil, nil, err
	}
	return l, m, nil
}

// NetworkInfo is what a wallet needs to pay on one network.
type NetworkInfo struct {
	Network        string
	Family         chain.Family
	ChainID        uint64
	ReceiveAddress string
	TokenAddress   string
	TokenDecimals  uint8
	ExplorerURL    string
}

// LinkInfo is what the hosted checkout page shows about a link.
type LinkInfo struct {
	Link     *models.PaymentLink
	Merchant *models.Merchant
	Networks []NetworkInfo
}

// Link answers the public description of a payable link.
func (s *Service) Link(ctx context.Context, id string) (LinkInfo, error) {
	l, m, err := s.openLink(ctx, id)
	if err != nil {
		return LinkInfo{}, err
	}
	info := LinkInfo{Link: l, Merchant: m}
	wallets := make([]string, 0, len(l.Networks))
	for _, n := range l.Networks {
		if w := l.WalletAddresses[n]; w != "" {
			wallets = append(wallets, w)
		}
	}
	provers, err := s.Store.WalletProvers(ctx, wallets)
	if err != nil {
		return LinkInfo{}, err
	}
	for _, n := range l.Networks {
		net, ok := s.Networks.Lookup(n)
		if !ok {
			continue
		}
		if bar, _ := provers.Bar(l.WalletAddresses[n], n, l.MerchantID); bar != models.WalletUnbarred {
			// Another merchant proved the wallet, or it is the merchant's
			// contract wallet proven on other networks: no session opens
			// on it (CreateSession), so the customer is not offered it.
			continue
		}
		info.Networks = append(info.Networks, NetworkInfo{Network: n, Family: net.Family, ChainID: net.ChainID,
			ReceiveAddress: l.WalletAddresses[n], TokenAddress: net.USDC, TokenDecimals: net.Decimals, ExplorerURL: net.ExplorerURL})
	}
	return info, nil
}

// walletOwned refuses (400) a network of a link whose receiving wallet
// another merchant proved after the link named it (a payment there would
// reach that merchant), or that the merchant proved since as a contract
// wallet on other networks only (a payment there would reach whatever is
// at that address there). Link leaves such a network out; Quote does not
// look (a quote pays nothing, and the create path's read is enough).
func (s *Service) walletOwned(ctx context.Context, l *models.PaymentLink, network string) error {
	bar, on, err := s.Store.WalletBar(ctx, l.WalletAddresses[network], network, l.MerchantID)
	if err != nil {
		return err
	}
	switch bar {
	case models.WalletProvenByOther:
		return apperr.Invalid("network", "this link cannot take payments on "+network+": its receiving wallet belongs to another merchant account")
	case models.WalletContractElsewhere:
		return apperr.Invalid("network", "this link cannot take payments on "+network+": its receiving wallet is "+
			models.ContractElsewhereReason(network, on))
	}
	return nil
}

// QuoteRequest asks for the tax on a link for a customer.
type QuoteRequest struct {
	LinkID  string
	Network string
	Country string
}

// QuoteResult is a quote with its signed token.
type QuoteResult struct {
	Quote Quote
	Token string
}

// Quote computes the tax for a link and signs the result.
func (s *Service) Quote(ctx context.Context, r QuoteRequest) (QuoteResult, error) {
	l, err := s.payableLink(ctx, r.LinkID)
	if err != nil {
		return QuoteResult{}, err
	}
	if !contains(l.Networks, r.Network) {
		return QuoteResult{}, apperr.Invalid("network", "is not accepted by this payment link")
	}
	cents, exact := l.Amount.Cents()
	if !exact {
		return QuoteResult{}, fmt.Errorf("link %s amount %s is not whole cents", l.ID, l.Amount)
	}
	q, tok, err := s.quote(ctx, l.ID, r.Network, r.Country, cents)
	return QuoteResult{Quote: q, Token: tok}, err
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// Totals is the snapshot the page shows the customer (SPEC.md totalsSnapshot).
type Totals struct {
	SubtotalCents int64
	TaxCents      int64
	TotalCents    int64
	CalculationID string
}

// Customer is who pays.
type Customer struct {
	Name, Email, Address, Country string
}

// CreateRequest opens a session (fields already validated for shape).
type CreateRequest struct {
	LinkID        string
	QuoteToken    string
	WalletAddress string
	WalletType    string
	Network       string
	Customer      Customer
	Totals        Totals
}

// Created is a new session with what a wallet needs to pay it.
type Created struct {
	Session *models.CheckoutSession
	Network NetworkInfo
}

// CreateSession checks the quote, stores the session with its first history
// entry, then starts its workflow. Should the start fail, the session is
// still answered: the repairer starts its workflow shortly after.
func (s *Service) CreateSession(ctx context.Context, r CreateRequest) (Created, error) {
	l, err := s.payableLink(ctx, r.LinkID)
	if err != nil {
		return Created{}, err
	}
	var v apperr.ValidationError
	if !contains(l.Networks, r.Network) {
		v.Add("network", "is not accepted by this payment link")
	}
	fam, _ := chain.FamilyOf(r.Network)
	if r.WalletType != string(fam) && !v.Has("network") {
		v.Add("walletType", fmt.Sprintf("must be %s for %s", fam, r.Network))
	}
	q, qerr := verifyQuote(s.Hasher, r.QuoteToken, s.now())
	switch {
	case qerr != nil:
		v.Add("quoteToken", qerr.Error())
	case q.LinkID != l.ID || q.Network != r.Network:
		v.Add("quoteToken", "was issued for another link or network")
	case q.Country != r.Customer.Country:
		v.Add("quoteToken", "was issued for another country")
	case q.SubtotalCents != r.Totals.SubtotalCents || q.TaxCents != r.Totals.TaxCents ||
		q.TotalCents != r.Totals.TotalCents || q.CalculationID != r.Totals.CalculationID:
		v.Add("totalsSnapshot", "does not match the quote")
	}
	if cents, _ := l.Amount.Cents(); qerr == nil && q.SubtotalCents != cents {
		v.Add("quoteToken", "the link's price changed: request a new quote")
	}
	net, ok := s.Networks.Lookup(r.Network)
	if !ok && !v.Has("network") {
		v.Add("network", "is not configured on this server")
	}
	if err := v.Err(); err != nil {
		return Created{}, err
	}
	if err := s.walletOwned(ctx, l, r.Network); err != nil {
		return Created{}, err
	}
	now := s.now()
	ref, err := NewPaymentReference(net.Family)
	if err != nil {
		return Created{}, err
	}
	cs := &models.CheckoutSession{PaymentReference: &ref, MerchantID: l.MerchantID, Mode: l.Mode, PaymentLinkID: l.ID, WalletAddress: r.WalletAddress,
		WalletType: r.WalletType, Network: r.Network, Subtotal: money.FromCents(q.SubtotalCents), Tax: money.FromCents(q.TaxCents),
		ExpectedAmount: money.FromCents(q.TotalCents), CalculationID: q.CalculationID, CustomerName: r.Customer.Name,
		CustomerEmail: r.Customer.Email, CustomerAddress: r.Customer.Address, CustomerCountry: r.Customer.Country,
		MerchantWalletAddress: l.WalletAddresses[r.Network], TokenAddress: net.USDC, ExpiresAt: now.Add(s.Lifetime)}
	cs.ProductID = l.ProductID
	if l.CheckoutID != nil {
		// A hosted checkout's session carries its metadata and the
		// merchant's customer id into checkout.completed, and ends with it.
		hc, err := s.Store.HostedCheckoutByID(ctx, *l.CheckoutID)
		if err != nil {
			return Created{}, err
		}
		if hc.Status != models.HostedOpen {
			return Created{}, apperr.Invalid("linkId", "the checkout is "+hc.Status)
		}
		cs.CheckoutID, cs.ExternalCustomerID, cs.Metadata = &hc.ID, hc.ExternalCustomerID, hc.Metadata
		if hc.ProductID != nil {
			cs.ProductID = hc.ProductID
		}
		if hc.ExpiresAt.Before(cs.ExpiresAt) {
			cs.ExpiresAt = hc.ExpiresAt
		}
	}
	if err := s.Store.CreateCheckoutSession(ctx, cs); err != nil {
		return Created{}, err
	}
	if err := s.startOnly(ctx, cs, nil, enums.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE); err != nil {
		s.log().WarnContext(ctx, "checkout workflow not started; the repairer will start it", "sessionId", cs.ID, "err", err)
	} else {
		s.markLater(cs.ID)
	}
	info := NetworkInfo{Network: r.Network, Family: net.Family, ChainID: net.ChainID, ReceiveAddress: cs.MerchantWalletAddress,
		TokenAddress: net.USDC, TokenDecimals: net.Decimals, ExplorerURL: net.ExplorerURL}
	return Created{Session: cs, Network: info}, nil
}

// StartWorkflow starts a session's workflow, or finds it started already
// (also after it closed: a session's workflow never runs twice), and then
// marks the session.
func (s *Service) StartWorkflow(ctx context.Context, cs *models.CheckoutSession) error {
	return s.start(ctx, cs, nil, enums.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE)
}

func (s *Service) start(ctx context.Context, cs *models.CheckoutSession, carry *workflows.CheckoutCarry, reuse enums.WorkflowIdReusePolicy) error {
	if err := s.startOnly(ctx, cs, carry, reuse); err != nil {
		return err
	}
	return s.Store.MarkWorkflowStarted(ctx, cs.ID)
}

// startOnly starts a session's workflow, or finds it started already; the
// caller marks the session.
func (s *Service) startOnly(ctx context.Context, cs *models.CheckoutSession, carry *workflows.CheckoutCarry, reuse enums.WorkflowIdReusePolicy) error {
	if s.Temporal == nil {
		return errors.New("checkout: no Temporal client")
	}
	net, _ := s.Networks.Lookup(cs.Network)
	in := workflows.CheckoutInput{SessionID: cs.ID, MerchantID: cs.MerchantID, PaymentLinkID: cs.PaymentLinkID, Network: cs.Network,
		MerchantWallet: cs.MerchantWalletAddress, PayerWallet: cs.WalletAddress, CreatedAt: cs.CreatedAt,
		ExpectedUnits: cs.ExpectedAmount.Units(), ExpiresAt: cs.ExpiresAt,
		PollInterval: net.PollInterval, NotFoundWindow: s.NotFoundWindow, Carry: carry, Shape: workflows.ShapeCurrent}
	if cs.PaymentReference != nil {
		in.PaymentReference = *cs.PaymentReference
	}
	opts := client.StartWorkflowOptions{
		ID:                    workflows.CheckoutWorkflowID(cs.ID),
		TaskQueue:             s.TaskQueue,
		WorkflowIDReusePolicy: reuse,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			workflows.CheckoutStatusAttr.ValueSet(cs.Status),
			workflows.MerchantIDAttr.ValueSet(cs.MerchantID),
			workflows.NetworkAttr.ValueSet(cs.Network),
			workflows.PaymentLinkIDAttr.ValueSet(cs.PaymentLinkID),
		),
		Memo: map[string]any{"amount": cs.ExpectedAmount.String(), "network": cs.Network, "paymentLinkId": cs.PaymentLinkID,
			"mode": string(cs.Mode), "merchantWalletAddress": cs.MerchantWalletAddress, "expiresAt": cs.ExpiresAt.Format(time.RFC3339)},
	}
	_, err := s.Temporal.ExecuteWorkflow(ctx, opts, workflows.CheckoutSessionWorkflow, in)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if err != nil && !errors.As(err, &already) {
		return err
	}
	return nil
}

// RepairOnce starts the workflow of every session older than grace whose
// workflow was never confirmed (a crash between the database write and the
// start), fails the open sessions of deleted links that were not told, and
// cancels the open sessions of closed hosted checkouts and of paid
// subscription invoices. It returns how many sessions it acted on.
func (s *Service) RepairOnce(ctx context.Context, grace time.Duration) (int, error) {
	// This process's pending marks first: a session it just started is
	// not the repairer's to start again.
	s.FlushMarks(ctx)
	rows, err := s.Store.SessionsWithoutWorkflow(ctx, s.now().Add(-grace), 100)
	if err != nil {
		return 0, err
	}
	n := 0
	for i := range rows {
		if err := s.StartWorkflow(ctx, &rows[i]); err != nil {
			s.log().Warn("repair: checkout workflow still not started", "sessionId", rows[i].ID, "err", err)
			continue
		}
		s.log().Info("repair: started the workflow of a session left without one", "sessionId", rows[i].ID)
		n++
	}
	n += s.reconcileOverdue(ctx)
	// Sessions of deleted links that did not hear of the deletion (a failure
	// half-way through DELETE, or a session created while it ran).
	orphans, err := s.Store.OpenSessionsOfDeletedLinks(ctx, 100)
	if err != nil {
		return n, err
	}
	if len(orphans) > 0 {
		n += s.failOpenSessions(ctx, orphans, workflows.CancelByLinkDeleted)
	}
	// Sessions of hosted checkouts cancelled, or paid through a sibling.
	closed, err := s.Store.OpenSessionsOfClosedCheckouts(ctx, 100)
	if err != nil {
		return n, err
	}
	if len(closed) > 0 {
		n += s.failOpenSessions(ctx, closed, workflows.CancelByMerchant)
	}
	// Sessions of subscription invoices paid through another session.
	paid, err := s.Store.OpenSessionsOfPaidInvoices(ctx, 100)
	if err != nil {
		return n, err
	}
	if len(paid) > 0 {
		n += s.failOpenSessions(ctx, paid, workflows.CancelByMerchant)
	}
	return n, nil
}

// reconcileOverdue finds sessions that should have ended by now and whose
// workflow is gone (a namespace reset) or was stopped without an outcome
// (terminated by an operator, failed): it starts the workflow again from the
// read model, which then expires the session, or keeps watching its
// broadcast transfer to a verdict.
func (s *Service) reconcileOverdue(ctx context.Context) int {
	grace := s.ReconcileGrace
	if grace == 0 {
		grace = time.Minute
	} else if grace < 0 {
		grace = 0
	}
	rows, err := s.Store.OverdueSessions(ctx, s.now().Add(-grace), s.now().Add(-s.NotFoundWindow-grace), 50)
	if err != nil {
		s.log().Warn("reconcile: overdue sessions not listed", "err", err)
		return 0
	}
	n := 0
	for i := range rows {
		cs := &rows[i]
		desc, err := s.Temporal.DescribeWorkflowExecution(ctx, workflows.CheckoutWorkflowID(cs.ID), "")
		var nf *serviceerror.NotFound
		switch {
		case errors.As(err, &nf):
		case err != nil:
			s.log().Warn("reconcile: workflow not described", "sessionId", cs.ID, "err", err)
			continue
		case desc.WorkflowExecutionInfo.GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_RUNNING:
			continue // still watching its transfer
		case desc.WorkflowExecutionInfo.GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_COMPLETED:
			s.log().Error("reconcile: workflow completed but the session is still open; needs an operator", "sessionId", cs.ID)
			continue
		}
		if err := s.resumeWorkflow(ctx, cs); err != nil {
			s.log().Warn("reconcile: workflow not resumed", "sessionId", cs.ID, "err", err)
			continue
		}
		s.log().Info("reconcile: resumed the workflow of an overdue session", "sessionId", cs.ID, "status", cs.Status)
		n++
	}
	return n
}

// resumeWorkflow starts a session's workflow again from the read model:
// its status, hash and history. A previous run that completed is never
// replaced (the reuse policy allows only failed, terminated or timed-out
// runs to be followed).
func (s *Service) resumeWorkflow(ctx context.Context, cs *models.CheckoutSession) error {
	hist, err := s.Store.SessionHistory(ctx, cs.ID)
	if err != nil {
		return err
	}
	carry := &workflows.CheckoutCarry{Status: cs.Status}
	if cs.TxHash != nil {
		carry.TxHash = *cs.TxHash
	}
	for _, e := range hist {
		carry.History = append(carry.History, workflows.HistoryEntry{ID: e.ID, Status: e.Status, Source: e.Source, Chain: e.Chain, At: e.CreatedAt})
		if e.Status == models.StatusBroadcast {
			carry.BroadcastAt = e.CreatedAt
		}
	}
	if carry.TxHash != "" && carry.BroadcastAt.IsZero() {
		carry.BroadcastAt = cs.UpdatedAt
	}
	if cs.Status == models.StatusConfirming {
		// The chain showed the transfer; when it last did is not stored, so
		// the not-found window starts again now. Starting it from the
		// broadcast would fail a confirming session at once on a node that
		// lags behind the one that saw it.
		carry.LastSeenAt = s.now()
	}
	return s.start(ctx, cs, carry, enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY)
}

// RunRepairer repairs every interval until ctx ends.
func (s *Service) RunRepairer(ctx context.Context, interval, grace time.Duration) {
	periodic.Run(ctx, interval, func(ctx context.Context) {
		if _, err := s.RepairOnce(ctx, grace); err != nil && ctx.Err() == nil {
			s.log().Warn("repair pass failed", "err", err)
		}
		// Idempotency keys are kept for 24 hours.
		if _, err := s.Store.SweepIdempotencyKeys(ctx, s.now().Add(-24*time.Hour)); err != nil && ctx.Err() == nil {
			s.log().Warn("idempotency keys not swept", "err", err)
		}
	})
}

// Session answers a session and its history (the status poll).
func (s *Service) Session(ctx context.Context, id string) (*models.CheckoutSession, []models.CheckoutSessionEvent, error) {
	cs, err := s.Store.CheckoutSession(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	h, err := s.Store.SessionHistory(ctx, id)
	return cs, h, err
}

// DefaultUpdateTimeout is Service.UpdateTimeout's default.
const DefaultUpdateTimeout = workflows.DefaultUpdateTimeout

func (s *Service) updateTimeout() time.Duration { return workflows.UpdateTimeout(s.UpdateTimeout) }

// errWorkersUnavailable is the answer when a session's workflow did not
// answer within the update timeout: the workers are down or overloaded (or
// Temporal is unreachable). A submit may still be applied once they are
// back: retrying with the same hash is answered as the first time.
func errWorkersUnavailable() error {
	return apperr.Unavailable("the checkout service is temporarily unavailable; retry shortly", workflows.UnavailableRetryAfter)
}

// unavailable: the session's workflow did not answer in time.
var unavailable = workflows.UpdateUnanswered

// update sends an update to a session's workflow and maps its refusals. It
// waits at most UpdateTimeout for the answer (503 after that). A non-empty
// updateID makes a retried request the same update: one admitted before
// the caller gave up (workers down) is attached to, and answered, rather
// than refused as a second submit in progress.
func (s *Service) update(ctx context.Context, cs *models.CheckoutSession, name, updateID string, arg, result any) error {
	uctx, cancel := context.WithTimeout(ctx, s.updateTimeout())
	defer cancel()
	if err := s.ensureWorkflow(uctx, cs); err != nil {
		if unavailable(ctx, uctx, err) {
			return errWorkersUnavailable()
		}
		return err
	}
	h, err := s.Temporal.UpdateWorkflow(uctx, client.UpdateWorkflowOptions{
		WorkflowID: workflows.CheckoutWorkflowID(cs.ID), UpdateName: name, UpdateID: updateID, Args: []any{arg},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(uctx, result)
	}
	if unavailable(ctx, uctx, err) {
		s.log().WarnContext(ctx, "workflow update not answered in time", "sessionId", cs.ID, "update", name,
			"timeout", s.updateTimeout().String(), "err", err)
		return errWorkersUnavailable()
	}
	return s.mapWorkflowError(ctx, cs, err)
}

// ensureWorkflow starts a session's workflow on demand if it was never
// started (the repairer would do it too, a little later).
func (s *Service) ensureWorkflow(ctx context.Context, cs *models.CheckoutSession) error {
	if cs.WorkflowStarted {
		return nil
	}
	return s.StartWorkflow(ctx, cs)
}

func (s *Service) mapWorkflowError(ctx context.Context, cs *models.CheckoutSession, err error) error {
	if err == nil {
		return nil
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		switch appErr.Type() {
		case workflows.ErrTypeSessionExpired:
			return apperr.New(apperr.ErrNotFound, "checkout session expired")
		case workflows.ErrTypeSubmitInProgress:
			return errSubmitInProgress
		case workflows.ErrTypeSessionNotOpen:
			return apperr.Conflict(appErr.Message())
		case "TxHashClaimed":
			return apperr.Conflict("transaction hash already attached to another session")
		case workflows.ErrTypeBadUpdate:
			return apperr.Invalid("body", appErr.Message())
		case workflows.ErrTypeTxHashReleased:
			return apperr.Invalid("txHash", appErr.Message())
		}
	}
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		// The workflow has closed: answer from the read model.
		cur, lerr := s.Store.CheckoutSession(ctx, cs.ID)
		if lerr == nil {
			if cur.Status == models.StatusExpired {
				return apperr.New(apperr.ErrNotFound, "checkout session expired")
			}
			return apperr.Conflict("checkout session is " + cur.Status)
		}
	}
	return err
}

// Submit attaches a broadcast transaction to a session.
func (s *Service) Submit(ctx context.Context, sessionID, txHash string) (workflows.SubmitResult, error) {
	return s.submit(ctx, sessionID, txHash, "client")
}

func (s *Service) submit(ctx context.Context, sessionID, txHash, source string) (workflows.SubmitResult, error) {
	cs, err := s.Store.CheckoutSession(ctx, sessionID)
	if err != nil {
		return workflows.SubmitResult{}, err
	}
	fam, _ := chain.FamilyOf(cs.Network)
	h, perr := chain.ParseTxHash(fam, txHash)
	if perr != nil {
		return workflows.SubmitResult{}, apperr.Invalid("txHash", perr.Error())
	}
	// The same hash again (a page retrying after a timeout, or after a 503
	// whose update the workflow applied later) is answered as the first
	// time, also once the session has its outcome (the poll shows it), so
	// the customer is never told to pay twice.
	if cs.TxHash != nil && *cs.TxHash == h {
		return workflows.SubmitResult{Status: models.StatusBroadcast, TxHash: h, SessionID: cs.ID, NextAction: "poll_status"}, nil
	}
	if source == "chain" && cs.TxHash != nil && cs.Status == models.StatusBroadcast {
		return s.replace(ctx, cs, h)
	}
	if err := precheck(cs, s.now()); err != nil {
		return workflows.SubmitResult{}, err
	}
	var res workflows.SubmitResult
	req := workflows.SubmitRequest{TxHash: h}
	if source == "chain" {
		req.Source = source
	}
	// One update per hash: a submit retried after a 503 joins the first.
	// After a release (a stranger's transaction given back) the same hash
	// is a new request, which the workflow refuses if it was released.
	updateID := "submit:" + h
	if cs.FailureMessage != "" {
		n, err := s.Store.SessionReleases(ctx, cs.ID)
		if err != nil {
			return workflows.SubmitResult{}, err
		}
		if n > 0 {
			updateID += fmt.Sprintf(":%d", n)
		}
	}
	err = s.update(ctx, cs, workflows.CheckoutSubmitUpdate, updateID, req, &res)
	return res, err
}

// replace offers the transaction h, which the watcher found paying the
// session, in the place of the hash holding it while the chain has not
// shown that one (workflows: replace). Only a transaction that is on
// chain and pays the session in full from its declared wallet, or bound
// to it by its reference, is offered: the workflow checks it again, and a
// stranger's cannot take the place of the customer's hash, nor fill the
// workflow's history with refusals. A client's second hash is still a
// 409, as SPEC.md has it.
func (s *Service) replace(ctx context.Context, cs *models.CheckoutSession, h string) (workflows.SubmitResult, error) {
	taken := apperr.Conflict("session already has a transaction hash")
	if s.Verifier == nil || cs.WalletAddress == "" {
		return workflows.SubmitResult{}, taken
	}
	req := chain.VerifyRequest{Network: cs.Network, TxHash: h, MerchantAddress: cs.MerchantWalletAddress,
		ExpectedUnits: strconv.FormatInt(cs.ExpectedAmount.Units(), 10), PayerAddress: cs.WalletAddress,
		NotBefore: cs.CreatedAt.Add(-models.BlockClockSlack)}
	if cs.PaymentReference != nil {
		req.Reference = *cs.PaymentReference
	}
	res, err := s.Verifier.Verify(ctx, req)
	if err != nil {
		return workflows.SubmitResult{}, err
	}
	if !res.PaysInFull(cs.WalletAddress, cs.ExpectedAmount.Units()) {
		return workflows.SubmitResult{}, taken
	}
	// One update per minute: a retry within it joins the first, and a
	// refusal the workflow gave (its own check of the chain, a node
	// lagging, failed) is not the answer for good: Temporal answers a
	// finished update's id with its first outcome for the rest of the run.
	var out workflows.SubmitResult
	updateID := fmt.Sprintf("replace:%s:%s:%d", h, *cs.TxHash, s.now().Unix()/60)
	err = s.update(ctx, cs, workflows.CheckoutSubmitUpdate, updateID, workflows.SubmitRequest{TxHash: h, Source: "chain"}, &out)
	return out, err
}

// errSubmitInProgress: another submit of the session is being handled.
var errSubmitInProgress = apperr.Conflict("a transaction hash is being attached to this session")

// precheck answers from the read model what is already decided: an expired
// session is 404 (SPEC.md), one with a hash or an outcome is 409.
func precheck(cs *models.CheckoutSession, now time.Time) error {
	switch {
	case cs.Status == models.StatusExpired || (!now.Before(cs.ExpiresAt) && cs.TxHash == nil && !models.TerminalStatus(cs.Status)):
		return apperr.New(apperr.ErrNotFound, "checkout session expired")
	case cs.TxHash != nil:
		return apperr.Conflict("session already has a transaction hash")
	case models.TerminalStatus(cs.Status):
		return apperr.Conflict("checkout session is " + cs.Status)
	}
	return nil
}

// Wallet records wallet progress reported by the page.
func (s *Service) Wallet(ctx context.Context, sessionID, status string) (*models.CheckoutSession, error) {
	cs, err := s.Store.CheckoutSession(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	if err := precheck(cs, s.now()); err != nil {
		return nil, err
	}
	if cs.Status == status {
		return cs, nil // nothing changes (the workflow would record nothing)
	}
	// Anyone who knows the session's id may report progress: a session's
	// reports are bounded, else alternating two statuses grew its history
	// (every poll answers it whole) and its workflow's, which Temporal
	// ends at 51,200 events, the customer's payment then refused.
	if hist, err := s.Store.SessionHistory(ctx, sessionID); err != nil {
		return nil, err
	} else if walletReports(hist) >= maxWalletReports {
		return cs, nil
	}
	var st workflows.CheckoutState
	if err := s.update(ctx, cs, workflows.CheckoutWalletUpdate, "", workflows.WalletRequest{Status: status}, &st); err != nil {
		return nil, err
	}
	return s.Store.CheckoutSession(ctx, sessionID)
}

// maxWalletReports bounds the wallet progress entries of a session's
// history: a customer trying a few wallets reports far fewer.
const maxWalletReports = 20

// walletReports counts the wallet progress entries of a history.
func walletReports(hist []models.CheckoutSessionEvent) int {
	n := 0
	for _, e := range hist {
		if e.Status == models.StatusWalletConnecting || e.Status == models.StatusWalletReady {
			n++
		}
	}
	return n
}

// Cancel cancels a session before a broadcast; after one it is a 409. The
// signal is sent, then the outcome awaited (at most UpdateTimeout), so the
// answer says what really happened even when a submit raced the cancel;
// when the workers do not record it in time the answer is a 503.
func (s *Service) Cancel(ctx context.Context, cs *models.CheckoutSession, source string) (*models.CheckoutSession, error) {
	if err := precheck(cs, s.now()); err != nil {
		if errors.Is(err, apperr.ErrConflict) && cs.TxHash != nil {
			return nil, apperr.Conflict("the transaction was already broadcast; the session can no longer be cancelled")
		}
		return nil, err
	}
	uctx, cancel := context.WithTimeout(ctx, s.updateTimeout())
	defer cancel()
	if err := s.ensureWorkflow(uctx, cs); err != nil {
		if unavailable(ctx, uctx, err) {
			return nil, errWorkersUnavailable()
		}
		return nil, err
	}
	if err := s.Temporal.SignalWorkflow(uctx, workflows.CheckoutWorkflowID(cs.ID), "", workflows.CheckoutCancelSignal,
		workflows.CancelRequest{Source: source}); err != nil {
		if unavailable(ctx, uctx, err) {
			return nil, errWorkersUnavailable()
		}
		return nil, s.mapWorkflowError(ctx, cs, err)
	}
	// The signal is in the workflow's history; wait, as long as an update
	// would, for the workers to record the outcome. If they do not, the
	// answer is 503: the cancel still takes effect when they are back, and
	// a retry sends it again harmlessly.
	deadline := time.Now().Add(s.updateTimeout())
	for {
		cur, err := s.Store.CheckoutSession(ctx, cs.ID)
		if err != nil {
			return nil, err
		}
		switch {
		case cur.Status == models.StatusCancelled:
			return cur, nil
		case cur.TxHash != nil:
			return nil, apperr.Conflict("the transaction was already broadcast; the session can no longer be cancelled")
		case models.TerminalStatus(cur.Status):
			return nil, apperr.Conflict("checkout session is " + cur.Status)
		case time.Now().After(deadline):
			s.log().WarnContext(ctx, "cancel signalled but not recorded in time", "sessionId", cs.ID,
				"timeout", s.updateTimeout().String())
			return nil, errWorkersUnavailable()
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// LinkDeleted fails the link's sessions that have no broadcast (their
// workflows decide; a session whose transfer is already broadcast finishes
// through verification, because the customer's money has moved).
func (s *Service) LinkDeleted(ctx context.Context, link *models.PaymentLink) error {
	open, err := s.Store.OpenSessionsOfLink(ctx, link.ID)
	if err != nil {
		s.log().WarnContext(ctx, "link deleted; its open sessions will be failed by the repairer", "linkId", link.ID, "err", err)
		return nil
	}
	s.failOpenSessions(ctx, open, workflows.CancelByLinkDeleted)
	return nil
}

// failOpenSessions tells the workflows of sessions whose link is gone
// (source CancelByLinkDeleted: failed) or whose hosted checkout closed
// (CancelByMerchant: cancelled). A session that cannot be reached now is
// left to the repairer, which sends the signal again.
func (s *Service) failOpenSessions(ctx context.Context, open []models.CheckoutSession, source string) int {
	n := 0
	for i := range open {
		cs := &open[i]
		err := s.ensureWorkflow(ctx, cs)
		if err == nil {
			err = s.Temporal.SignalWorkflow(ctx, workflows.CheckoutWorkflowID(cs.ID), "", workflows.CheckoutCancelSignal,
				workflows.CancelRequest{Source: source})
		}
		var nf *serviceerror.NotFound
		if err != nil && !errors.As(err, &nf) {
			s.log().WarnContext(ctx, "session of a deleted link or closed checkout not reached; the repairer will retry",
				"sessionId", cs.ID, "err", err)
			continue
		}
		n++
	}
	return n
}
