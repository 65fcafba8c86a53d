package models

import (
	"context"
	"slices"
	"time"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/money"
	"gorm.io/gorm"
)

// CreateProduct stores a catalog product.
func (s *Store) CreateProduct(ctx context.Context, p *Product) error {
	now := s.Now()
	p.ID, p.CreatedAt, p.UpdatedAt = NewID(), now, now
	return s.ctx(ctx).Create(p).Error
}

// Products lists a page of the scope's products, newest first; active, when
// set, filters on it.
func (s *Store) Products(ctx context.Context, sc Scope, active *bool, p Page) ([]Product, bool, error) {
	q := s.scoped(ctx, sc)
	if active != nil {
		q = q.Where("active = ?", *active)
	}
	return fetchPage[Product](q, p)
}

// ProductOf loads one of the scope's products.
func (s *Store) ProductOf(ctx context.Context, sc Scope, id string) (*Product, error) {
	var p Product
	err := s.scoped(ctx, sc).Where("id = ?", id).Take(&p).Error
	return &p, notFound(err)
}

// ProductUpdate holds the fields of a PATCH; nil leaves a field alone.
type ProductUpdate struct {
	Name, Description, ImageURL *string
	Price                       *money.Amount
	Active                      *bool
}

// UpdateProduct applies the fields that were sent.
func (s *Store) UpdateProduct(ctx context.Context, sc Scope, id string, u ProductUpdate) (*Product, error) {
	fields := map[string]any{"updated_at": s.Now()}
	if u.Name != nil {
		fields["name"] = *u.Name
	}
	if u.Description != nil {
		fields["description"] = *u.Description
	}
	if u.ImageURL != nil {
		fields["image_url"] = *u.ImageURL
	}
	if u.Price != nil {
		fields["price"] = *u.Price
	}
	if u.Active != nil {
		fields["active"] = *u.Active
	}
	res := s.scoped(ctx, sc).Model(&Product{}).Where("id = ?", id).Updates(fields)
	if res.Error != nil {
		return nil, res.Error
	}
	if res.RowsAffected == 0 {
		return nil, apperr.New(apperr.ErrNotFound, "not found")
	}
	return s.ProductOf(ctx, sc, id)
}

// CreateHostedCheckout stores a hosted checkout and the single-use link it
// sells through, in one transaction.
func (s *Store) CreateHostedCheckout(ctx context.Context, hc *HostedCheckout, l *PaymentLink) error {
	now := s.Now()
	hc.ID, hc.CreatedAt, hc.UpdatedAt, hc.Status = NewID(), now, now, HostedOpen
	l.ID, l.CreatedAt, l.UpdatedAt, l.Active = NewID(), now, now, true
	l.CheckoutID, l.ExpiresAt, hc.PaymentLinkID = &hc.ID, &hc.ExpiresAt, l.ID
	if hc.Metadata == nil {
		hc.Metadata = StringMap{}
	}
	return s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(l).Error; err != nil {
			return err
		}
		return tx.Create(hc).Error
	})
}

// HostedCheckoutOf loads one of the scope's hosted checkouts, with its
// status brought up to date (an open one past its expiry is expired).
func (s *Store) HostedCheckoutOf(ctx context.Context, sc Scope, id string) (*HostedCheckout, error) {
	var hc HostedCheckout
	if err := s.scoped(ctx, sc).Where("id = ?", id).Take(&hc).Error; err != nil {
		return nil, notFound(err)
	}
	rows := []HostedCheckout{hc}
	if err := s.expireHosted(s.ctx(ctx), rows); err != nil {
		return nil, err
	}
	return &rows[0], nil
}

// HostedCheckoutByID loads a hosted checkout of any merchant (pages).
func (s *Store) HostedCheckoutByID(ctx context.Context, id string) (*HostedCheckout, error) {
	var hc HostedCheckout
	if err := s.ctx(ctx).Where("id = ?", id).Take(&hc).Error; err != nil {
		return nil, notFound(err)
	}
	rows := []HostedCheckout{hc}
	if err := s.expireHosted(s.ctx(ctx), rows); err != nil {
		return nil, err
	}
	return &rows[0], nil
}

// expireHosted brings the rows' status up to date: an open checkout past
// its expiry is expired, unless one of its sessions holds a transfer
// broadcast before the end (it completes the checkout when it confirms:
// answered "expired", a merchant would read the order as lost and the
// customer's money would land on a closed order). It stays open, taking
// no new session, until that payment completes it or fails.
func (s *Store) expireHosted(db *gorm.DB, rows []HostedCheckout) error {
	now := s.Now()
	var due []string
	for i := range rows {
		if rows[i].Status == HostedOpen && !now.Before(rows[i].ExpiresAt) {
			due = append(due, rows[i].ID)
		}
	}
	if len(due) == 0 {
		return nil
	}
	var moving []string
	if err := db.Model(&CheckoutSession{}).Distinct("checkout_id").Where("checkout_id IN ?", due).
		Where(movingPayment, terminalStatuses, []string{StatusBroadcast, StatusConfirming}).Pluck("checkout_id", &moving).Error; err != nil {
		return err
	}
	for i := range rows {
		if rows[i].Status == HostedOpen && !now.Before(rows[i].ExpiresAt) && !slices.Contains(moving, rows[i].ID) {
			rows[i].Status = HostedExpired
		}
	}
	return nil
}

// movingPayment selects a session holding a transfer on its way: a hash
// recorded, or a broadcast or confirming status, and no outcome yet.
const movingPayment = "status NOT IN ? AND (tx_hash IS NOT NULL OR status IN ?)"

// HostedCheckouts lists a page of the scope's hosted checkouts, newest first.
func (s *Store) HostedCheckouts(ctx context.Context, sc Scope, p Page) ([]HostedCheckout, bool, error) {
	rows, more, err := fetchPage[HostedCheckout](s.scoped(ctx, sc), p)
	if err != nil {
		return nil, false, err
	}
	if err := s.expireHosted(s.ctx(ctx), rows); err != nil {
		return nil, false, err
	}
	return rows, more, nil
}

// CancelHostedCheckout cancels an open hosted checkout and closes its link;
// the caller cancels the link's open sessions.
func (s *Store) CancelHostedCheckout(ctx context.Context, sc Scope, id string) (*HostedCheckout, error) {
	var hc HostedCheckout
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Where("id = ? AND merchant_id = ? AND mode = ?", id, sc.MerchantID, sc.Mode).Take(&hc).Error; err != nil {
			return notFound(err)
		}
		rows := []HostedCheckout{hc}
		if err := s.expireHosted(tx, rows); err != nil {
			return err
		}
		if hc = rows[0]; hc.Status != HostedOpen {
			return apperr.Conflict("the checkout is " + hc.Status)
		}
		// A payment already on its way completes the checkout when it
		// confirms, whatever this says: a cancel answered "cancelled" then
		// would be read as final (goods not shipped, a second checkout
		// sent) while the customer's money lands.
		var moving int64
		if err := tx.Model(&CheckoutSession{}).Where("checkout_id = ?", hc.ID).
			Where(movingPayment, terminalStatuses, []string{StatusBroadcast, StatusConfirming}).Count(&moving).Error; err != nil {
			return err
		}
		if moving > 0 {
			return apperr.WithHint(apperr.ErrConflict, "a payment of this checkout is being confirmed on chain; it cannot be cancelled",
				"it completes or fails within minutes (checkout.completed or checkout.failed); cancel then if it failed")
		}
		now := s.Now()
		// Guarded by the status read: a session completing the checkout
		// between that read and this write (PostgreSQL: it holds the row
		// until its commit) has won, and the customer paid.
		res := tx.Model(&HostedCheckout{}).Where("id = ? AND status = ?", hc.ID, HostedOpen).
			Updates(map[string]any{"status": HostedCancelled, "updated_at": now})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			if err := tx.Where("id = ?", hc.ID).Take(&hc).Error; err != nil {
				return err
			}
			return apperr.Conflict("the checkout is " + hc.Status)
		}
		hc.Status, hc.UpdatedAt = HostedCancelled, now
		return tx.Model(&PaymentLink{}).Where("id = ?", hc.PaymentLinkID).Updates(map[string]any{"active": false, "updated_at": now}).Error
	})
	return &hc, err
}

// completeHosted marks a session's hosted checkout complete and closes its
// single-use link (inside FinishSession's transaction). A checkout cancelled
// or expired while its session's transfer was already on its way is
// complete too: the customer paid it (its other open sessions are
// cancelled by the checkout repairer).
func completeHosted(tx *gorm.DB, cs *CheckoutSession, at time.Time) error {
	if cs.CheckoutID == nil {
		return nil
	}
	if err := tx.Model(&HostedCheckout{}).Where("id = ? AND status <> ?", *cs.CheckoutID, HostedComplete).
		Updates(map[string]any{"status": HostedComplete, "session_id": cs.ID, "updated_at": at}).Error; err != nil {
		return err
	}
	return tx.Model(&PaymentLink{}).Where("checkout_id = ?", *cs.CheckoutID).Updates(map[string]any{"active": false, "updated_at": at}).Error
}

// OpenSessionsOfClosedCheckouts lists sessions without a broadcast whose
// hosted checkout is no longer open (cancelled by the merchant, or paid
// through another of its sessions): their workflows must hear of it. The
// cancel route tells them at once; this is the repairer's sweep for those
// it could not reach, or that were created while it ran.
func (s *Store) OpenSessionsOfClosedCheckouts(ctx context.Context, limit int) ([]CheckoutSession, error) {
	var rows []CheckoutSession
	err := s.ctx(ctx).Where("status IN ? AND checkout_id IN (?)", PreBroadcastStatuses,
		s.db.Model(&HostedCheckout{}).Select("id").Where("status IN ('"+HostedCancelled+"', '"+HostedComplete+"')")).
		Order("id asc").Limit(limit).Find(&rows).Error
	return rows, err
}

// OpenSessionsOfPaidInvoices lists open sessions (nothing broadcast) of
// subscription invoices that another of their sessions has paid: the
// repairer cancels them, so a customer holding an older or newer link of
// a paid invoice cannot pay it again.
func (s *Store) OpenSessionsOfPaidInvoices(ctx context.Context, limit int) ([]CheckoutSession, error) {
	var rows []CheckoutSession
	err := s.ctx(ctx).Table("checkout_sessions AS cs").Select("cs.*").
		Where("cs.status IN ? AND cs.subscription_id IS NOT NULL AND cs.invoice_number > 0", PreBroadcastStatuses).
		Where(`EXISTS (SELECT 1 FROM checkout_sessions AS paid
			WHERE paid.subscription_id = cs.subscription_id AND paid.invoice_number = cs.invoice_number AND paid.status = ?)`, StatusComplete).
		Order("cs.id asc").Limit(limit).Find(&rows).Error
	return rows, err
}
