package models

import (
	"context"
	"strings"
	"time"

	"github.com/paygate/paygate/money"
	"gorm.io/gorm"
)

// Page asks for one page of a cursor list, newest first.
type Page struct {
	Limit         int    // 1 to 100
	StartingAfter string // id of the last item of the previous page; "" for the first
}

// paginate applies a page to a query over a table whose ids are UUIDv7
// (creation order), and fetches one extra row to learn whether more follow.
func paginate(q *gorm.DB, p Page) *gorm.DB {
	if p.StartingAfter != "" {
		q = q.Where("id < ?", p.StartingAfter)
	}
	return q.Order("id desc").Limit(p.Limit + 1)
}

// trimPage cuts the extra row and reports whether there was one.
func trimPage[T any](rows []T, p Page) ([]T, bool) {
	if len(rows) > p.Limit {
		return rows[:p.Limit], true
	}
	return rows, false
}

// fetchPage runs a list query for one page and reports whether more follow.
func fetchPage[T any](q *gorm.DB, p Page) ([]T, bool, error) {
	var rows []T
	if err := paginate(q, p).Find(&rows).Error; err != nil {
		return nil, false, err
	}
	rows, more := trimPage(rows, p)
	return rows, more, nil
}

// equal adds `column = value` for every pair whose value is not empty
// (list filters that were not given do not filter).
func equal(q *gorm.DB, pairs ...string) *gorm.DB {
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] != "" {
			q = q.Where(pairs[i]+" = ?", pairs[i+1])
		}
	}
	return q
}

// createdBetween keeps rows created strictly after since and before until.
func createdBetween(q *gorm.DB, since, until *time.Time) *gorm.DB {
	if since != nil {
		q = q.Where("created_at > ?", *since)
	}
	if until != nil {
		q = q.Where("created_at < ?", *until)
	}
	return q
}

// Scope names the owner and mode every read and write is confined to.
type Scope struct {
	MerchantID string
	Mode       Mode
}

func (s *Store) scoped(ctx context.Context, sc Scope) *gorm.DB {
	return s.ctx(ctx).Where("merchant_id = ? AND mode = ?", sc.MerchantID, sc.Mode)
}

// linksOnly is the condition of a merchant's own payment links: the links
// that price subscriptions belong to their subscriptions, and a hosted
// checkout's single-use link is the checkout's (changed, it would charge
// what the checkout does not show; deleted, it would take the checkout's
// page away while the checkout stays open).
const linksOnly = "subscription_id IS NULL AND checkout_id IS NULL"

// merchantLinks confines link queries to the scope's own links (linksOnly).
func (s *Store) merchantLinks(ctx context.Context, sc Scope) *gorm.DB {
	return s.scoped(ctx, sc).Where(linksOnly)
}

// CreatePaymentLink stores a new active link.
func (s *Store) CreatePaymentLink(ctx context.Context, l *PaymentLink) error {
	now := s.Now()
	l.ID, l.CreatedAt, l.UpdatedAt, l.Active = NewID(), now, now, true
	return s.ctx(ctx).Create(l).Error
}

// PaymentLinks lists the scope's links, newest first, optionally only those
// paying into wallet (on any of their networks; EVM addresses compare
// without regard to case).
func (s *Store) PaymentLinks(ctx context.Context, sc Scope, wallet string) ([]PaymentLink, error) {
	var links []PaymentLink
	if err := s.merchantLinks(ctx, sc).Order("id desc").Find(&links).Error; err != nil {
		return nil, err
	}
	if wallet == "" {
		return links, nil
	}
	out := links[:0]
	for _, l := range links {
		for _, addr := range l.WalletAddresses {
			if addr == wallet || (strings.HasPrefix(addr, "0x") && strings.EqualFold(addr, wallet)) {
				out = append(out, l)
				break
			}
		}
	}
	return out, nil
}

// LinkFilter narrows a page of payment links.
type LinkFilter struct {
	Active *bool
	// Search matches part of the name, ignoring case.
	Search string
}

// PaymentLinkPage lists a page of the scope's links (linksOnly), newest
// first.
func (s *Store) PaymentLinkPage(ctx context.Context, sc Scope, f LinkFilter, p Page) ([]PaymentLink, bool, error) {
	q := s.merchantLinks(ctx, sc)
	if f.Active != nil {
		q = q.Where("active = ?", *f.Active)
	}
	if f.Search != "" {
		q = q.Where(`lower(name) LIKE ? ESCAPE '\'`, likeContains(f.Search))
	}
	return fetchPage[PaymentLink](q, p)
}

// PaymentLink loads one of the scope's links.
func (s *Store) PaymentLink(ctx context.Context, sc Scope, id string) (*PaymentLink, error) {
	var l PaymentLink
	err := s.merchantLinks(ctx, sc).Where("id = ?", id).Take(&l).Error
	return &l, notFound(err)
}

// PaymentLinkByID loads a link of any merchant (public checkout pages).
func (s *Store) PaymentLinkByID(ctx context.Context, id string) (*PaymentLink, error) {
	var l PaymentLink
	// On the readers: every quote and create reads its link, and on SQLite
	// the single writer connection would queue them behind inserts.
	err := s.reader(ctx).Where("id = ?", id).Take(&l).Error
	return &l, notFound(err)
}

// PaymentLinkOfMerchant loads a link of the merchant in either mode
// (dashboard routes act on ids regardless of mode).
func (s *Store) PaymentLinkOfMerchant(ctx context.Context, merchantID, id string) (*PaymentLink, error) {
	var l PaymentLink
	err := s.ctx(ctx).Where("merchant_id = ? AND id = ?", merchantID, id).Where(linksOnly).Take(&l).Error
	return &l, notFound(err)
}

// PaymentLinkUpdate holds the fields PATCH may change; nil leaves a field.
type PaymentLinkUpdate struct {
	Name        *string
	Description *string
	Amount      *money.Amount
	Active      *bool
}

// UpdatePaymentLink applies the fields that were sent.
func (s *Store) UpdatePaymentLink(ctx context.Context, sc Scope, id string, u PaymentLinkUpdate) (*PaymentLink, error) {
	fields := map[string]any{}
	if u.Name != nil {
		fields["name"] = *u.Name
	}
	if u.Description != nil {
		fields["description"] = *u.Description
	}
	if u.Amount != nil {
		fields["amount"] = *u.Amount
	}
	if u.Active != nil {
		fields["active"] = *u.Active
	}
	if len(fields) > 0 {
		fields["updated_at"] = s.Now()
		res := s.merchantLinks(ctx, sc).Model(&PaymentLink{}).Where("id = ?", id).Updates(fields)
		if res.Error != nil {
			return nil, res.Error
		}
	}
	return s.PaymentLink(ctx, sc, id)
}

// DeletePaymentLink removes the merchant's link permanently (the row stays,
// soft-deleted, so its sessions and transactions keep their reference).
func (s *Store) DeletePaymentLink(ctx context.Context, merchantID, id string) (*PaymentLink, error) {
	l, err := s.PaymentLinkOfMerchant(ctx, merchantID, id)
	if err != nil {
		return nil, err
	}
	if err := s.ctx(ctx).Delete(&PaymentLink{}, "id = ?", l.ID).Error; err != nil {
		return nil, err
	}
	return l, nil
}

// PaymentLinkAnyState loads a link by id, deleted ones included (the
// hosted page still shows a session whose link was deleted).
func (s *Store) PaymentLinkAnyState(ctx context.Context, id string) (*PaymentLink, error) {
	var l PaymentLink
	err := s.ctx(ctx).Unscoped().Where("id = ?", id).Take(&l).Error
	return &l, notFound(err)
}
