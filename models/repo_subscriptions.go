package models

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/paygate/paygate/apperr"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// CreateSubscription stores a subscription as given (tests and the
// repairer's fixtures use it directly; the API goes through
// CreateSubscriptionFor).
func (s *Store) CreateSubscription(ctx context.Context, sub *Subscription) error {
	now := s.Now()
	sub.ID, sub.CreatedAt, sub.UpdatedAt = NewID(), now, now
	if sub.IntervalCount == 0 {
		sub.IntervalCount = 1
	}
	return s.ctx(ctx).Create(sub).Error
}

// CustomerByEmail loads the scope's customer with this e-mail.
func (s *Store) CustomerByEmail(ctx context.Context, sc Scope, email string) (*Customer, error) {
	var c Customer
	err := s.scoped(ctx, sc).Where("email = ?", email).Take(&c).Error
	return &c, notFound(err)
}

// CreateSubscriptionFor stores a new subscription of a customer in one
// transaction: newCustomer, when given, is created first (or, if another
// request created the same e-mail meanwhile, that customer is used). The
// row starts with WorkflowStarted false; the caller starts the workflow.
func (s *Store) CreateSubscriptionFor(ctx context.Context, sub *Subscription, newCustomer *Customer) error {
	now := s.Now()
	sub.ID, sub.CreatedAt, sub.UpdatedAt, sub.WorkflowStarted = NewID(), now, now, false
	if sub.IntervalCount == 0 {
		sub.IntervalCount = 1
	}
	return s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		if newCustomer != nil {
			c := *newCustomer
			c.ID, c.CreatedAt, c.UpdatedAt = NewID(), now, now
			if c.Metadata == nil {
				c.Metadata = StringMap{}
			}
			if err := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&c).Error; err != nil {
				return err
			}
			var got Customer
			if err := tx.Where("merchant_id = ? AND mode = ? AND email = ?", c.MerchantID, c.Mode, c.Email).Take(&got).Error; err != nil {
				return err
			}
			*newCustomer = got
			sub.CustomerID = &got.ID
		}
		return tx.Create(sub).Error
	})
}

// Subscriptions lists a page of the scope's subscriptions, newest first,
// optionally of one status.
func (s *Store) Subscriptions(ctx context.Context, sc Scope, status string, p Page) ([]Subscription, bool, error) {
	return fetchPage[Subscription](equal(s.scoped(ctx, sc), "status", status), p)
}

// Subscription loads one of the scope's subscriptions.
func (s *Store) Subscription(ctx context.Context, sc Scope, id string) (*Subscription, error) {
	var sub Subscription
	err := s.scoped(ctx, sc).Where("id = ?", id).Take(&sub).Error
	return &sub, notFound(err)
}

// SubscriptionByID loads a subscription of any merchant (workers).
func (s *Store) SubscriptionByID(ctx context.Context, id string) (*Subscription, error) {
	var sub Subscription
	err := s.ctx(ctx).Where("id = ?", id).Take(&sub).Error
	return &sub, notFound(err)
}

// MarkSubscriptionWorkflowStarted records that a subscription's workflow exists.
func (s *Store) MarkSubscriptionWorkflowStarted(ctx context.Context, id string) error {
	return s.ctx(ctx).Model(&Subscription{}).Where("id = ?", id).Update("workflow_started", true).Error
}

// SubscriptionsWithoutWorkflow lists subscriptions created before `before`
// whose workflow was never confirmed started and that have not ended,
// oldest first.
func (s *Store) SubscriptionsWithoutWorkflow(ctx context.Context, before time.Time, limit int) ([]Subscription, error) {
	var rows []Subscription
	err := s.ctx(ctx).Where("workflow_started = ? AND created_at < ? AND status <> ?", false, before, SubCanceled).
		Order("id asc").Limit(limit).Find(&rows).Error
	return rows, err
}

// SubscriptionRecord is one change of a subscription as its workflow
// decided it: the row's new state and the events that report it. Seq
// orders the changes; a record whose Seq is not above the row's is a retry:
// the row is left alone and its events (keyed by type, subscription and
// Seq) are not emitted twice.
type SubscriptionRecord struct {
	SubscriptionID     string
	Seq                int64
	Status             string
	CurrentPeriodStart time.Time
	CurrentPeriodEnd   time.Time
	CancelAtPeriodEnd  bool
	TrialEnd           *time.Time
	BillingAnchor      *time.Time
	PausedAt           *time.Time
	CanceledAt         *time.Time
	CancelReason       string
	LatestSessionID    string
	// BillingError: why the subscription cannot be billed now ("" none).
	BillingError string
	At           time.Time
	Events       []SubscriptionEventSpec
}

// SubscriptionEventSpec is an event of a change: its type and the fields it
// adds to the subscription's own (SubscriptionEventData).
type SubscriptionEventSpec struct {
	Type  string
	Extra map[string]any
}

// SubscriptionEventTypes are the events subscriptions emit.
var SubscriptionEventTypes = []string{"subscription.created", "subscription.updated", "subscription.renewed",
	"subscription.renewal_due", "subscription.past_due", "subscription.canceled"}

// RecordSubscription writes a change of a subscription and its events in
// one transaction, and returns the deliveries of those events (also when the
// change had been written before).
func (s *Store) RecordSubscription(ctx context.Context, r SubscriptionRecord) ([]string, error) {
	var ids []string
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		var sub Subscription
		if err := tx.Where("id = ?", r.SubscriptionID).Take(&sub).Error; err != nil {
			return notFound(err)
		}
		if r.Seq > sub.ChangeSeq {
			fields := map[string]any{"status": r.Status, "current_period_start": r.CurrentPeriodStart.UTC(),
				"current_period_end": r.CurrentPeriodEnd.UTC(), "cancel_at_period_end": r.CancelAtPeriodEnd,
				"trial_end": utcPtr(r.TrialEnd), "billing_anchor": utcPtr(r.BillingAnchor), "paused_at": utcPtr(r.PausedAt),
				"canceled_at": utcPtr(r.CanceledAt), "cancel_reason": r.CancelReason, "billing_error": r.BillingError, "change_seq": r.Seq,
				"workflow_started": true, "updated_at": s.Now()}
			if r.LatestSessionID != "" {
				fields["latest_session_id"] = r.LatestSessionID
			}
			res := tx.Model(&Subscription{}).Where("id = ? AND change_seq < ?", sub.ID, r.Seq).Updates(fields)
			if res.Error != nil {
				return res.Error
			}
			if err := tx.Where("id = ?", r.SubscriptionID).Take(&sub).Error; err != nil {
				return err
			}
		}
		at := r.At
		if at.IsZero() {
			at = s.Now()
		}
		for i, ev := range r.Events {
			data := SubscriptionEventData(&sub, r)
			for k, v := range ev.Extra {
				data[k] = v
			}
			key := ev.Type + ":" + sub.ID + ":" + strconv.FormatInt(r.Seq, 10)
			if i > 0 {
				key += ":" + strconv.Itoa(i)
			}
			if _, paid := ev.Extra["transactionId"]; ev.Type == "subscription.renewed" && r.LatestSessionID != "" && !paid {
				if err := s.addPayment(tx, data, r.LatestSessionID); err != nil {
					return err
				}
			}
			got, err := s.emitEvent(tx, sub.MerchantID, sub.Mode, EventSpec{Type: ev.Type, Key: key, Data: data}, at)
			if err != nil {
				return err
			}
			ids = append(ids, got...)
		}
		return nil
	})
	return ids, err
}

// addPayment adds the transaction that paid an invoice's session.
func (s *Store) addPayment(tx *gorm.DB, data map[string]any, sessionID string) error {
	var t Transaction
	err := tx.Where("session_id = ?", sessionID).Take(&t).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		data["transactionId"], data["txHash"] = nil, nil
		return nil
	}
	if err != nil {
		return err
	}
	data["transactionId"], data["txHash"] = t.ID, t.TxHash
	return nil
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil || t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// eventTime formats an event timestamp (UTC, milliseconds), nil for none.
func eventTime(t *time.Time) any {
	if t == nil || t.IsZero() {
		return nil
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// SubscriptionEventData is the part every subscription.* event carries: the
// subscription as the change left it (documented as SubscriptionEventData in
// api/openapi.yaml).
func SubscriptionEventData(sub *Subscription, r SubscriptionRecord) map[string]any {
	var customerID any
	if sub.CustomerID != nil {
		customerID = *sub.CustomerID
	}
	start, end := r.CurrentPeriodStart, r.CurrentPeriodEnd
	var billingError any
	if r.BillingError != "" {
		billingError = r.BillingError
	}
	return map[string]any{
		"subscriptionId": sub.ID, "customerId": customerID, "customerEmail": sub.CustomerEmail,
		"customerWalletAddress": sub.CustomerWalletAddress, "status": r.Status, "network": sub.Network,
		"billingModel": sub.BillingModel, "productName": sub.ProductName, "amount": sub.Amount.String(), "token": "USDC",
		"billingInterval": sub.BillingInterval, "intervalCount": sub.IntervalCount,
		"currentPeriodStart": eventTime(&start), "currentPeriodEnd": eventTime(&end),
		"cancelAtPeriodEnd": r.CancelAtPeriodEnd, "trialEnd": eventTime(r.TrialEnd), "pausedAt": eventTime(r.PausedAt),
		"canceledAt": eventTime(r.CanceledAt), "merchantWalletAddress": sub.MerchantWalletAddress,
		"livemode": sub.Mode == ModeLive, "billingError": billingError,
	}
}

// SubscriptionLink returns the link that prices a subscription's renewals,
// creating it on first use: inactive (the public pages take no sessions on
// it), on the subscription's network and wallet, named after its product.
func (s *Store) SubscriptionLink(ctx context.Context, subscriptionID string) (*PaymentLink, error) {
	var l PaymentLink
	err := s.ctx(ctx).Unscoped().Where("subscription_id = ?", subscriptionID).Take(&l).Error
	if err == nil {
		return &l, nil
	}
	if !errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, err
	}
	sub, err := s.SubscriptionByID(ctx, subscriptionID)
	if err != nil {
		return nil, err
	}
	if sub.MerchantWalletAddress == "" {
		return nil, apperr.Invalid("merchantWalletAddress", "the subscription has no receiving wallet")
	}
	now := s.Now()
	name := sub.ProductName
	if name == "" {
		name = "Subscription"
	}
	l = PaymentLink{ID: NewID(), MerchantID: sub.MerchantID, Mode: sub.Mode, Name: name,
		Description: "Renewals of subscription " + sub.ID, Amount: sub.Amount, Currency: "USD", Network: sub.Network,
		Networks: StringList{sub.Network}, Token: "USDC", Active: false, WalletAddresses: StringMap{sub.Network: sub.MerchantWalletAddress},
		MerchantWalletAddress: sub.MerchantWalletAddress, SubscriptionID: &sub.ID, CreatedAt: now, UpdatedAt: now}
	if err := s.ctx(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&l).Error; err != nil {
		return nil, err
	}
	var got PaymentLink
	err = s.ctx(ctx).Unscoped().Where("subscription_id = ?", subscriptionID).Take(&got).Error
	return &got, err
}

// CreateInvoiceSession stores a checkout session whose id the caller chose
// (the subscription workflow, so that a retried activity finds the session
// it created instead of opening another) with its first history entry. It
// returns the stored session and whether this call created it.
func (s *Store) CreateInvoiceSession(ctx context.Context, cs *CheckoutSession) (*CheckoutSession, bool, error) {
	if cs.ID == "" || cs.SubscriptionID == nil {
		return nil, false, errors.New("models: an invoice session needs its id and subscription")
	}
	if got, err := s.CheckoutSession(ctx, cs.ID); err == nil {
		return got, false, nil
	} else if !errors.Is(err, apperr.ErrNotFound) {
		return nil, false, err
	}
	now := s.Now()
	cs.CreatedAt, cs.UpdatedAt, cs.Status, cs.WorkflowStarted = now, now, StatusCreated, false
	entry := CheckoutSessionEvent{ID: NewID(), SessionID: cs.ID, Status: StatusCreated, Source: "server", CreatedAt: now}
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(cs).Error; err != nil {
			return err
		}
		return tx.Create(&entry).Error
	})
	if isUniqueViolation(err) {
		got, gerr := s.CheckoutSession(ctx, cs.ID)
		return got, false, gerr
	}
	if err != nil {
		return nil, false, err
	}
	s.sessionsChanged(cs.ID)
	return cs, true, nil
}
