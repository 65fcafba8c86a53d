package models

import (
	"context"

	"github.com/paygate/paygate/apperr"
	"gorm.io/gorm"
)

var errDuplicateEmail = apperr.Conflict("a customer with this email already exists")

// CreateCustomer stores a customer; a taken e-mail in the scope is a conflict.
func (s *Store) CreateCustomer(ctx context.Context, c *Customer) error {
	now := s.Now()
	c.ID, c.CreatedAt, c.UpdatedAt = NewID(), now, now
	if c.Metadata == nil {
		c.Metadata = StringMap{}
	}
	err := s.ctx(ctx).Create(c).Error
	if isUniqueViolation(err) {
		return errDuplicateEmail
	}
	return err
}

// Customer loads one of the scope's customers.
func (s *Store) Customer(ctx context.Context, sc Scope, id string) (*Customer, error) {
	var c Customer
	err := s.scoped(ctx, sc).Where("id = ?", id).Take(&c).Error
	return &c, notFound(err)
}

// CustomerUpdate holds the fields PATCH may change; nil leaves a field.
// Metadata merges key by key; an empty value removes the key.
type CustomerUpdate struct {
	Email         *string
	Name          *string
	WalletAddress *string
	Country       *string
	Metadata      map[string]string
}

// MaxMetadataKeys bounds a customer's metadata object.
const MaxMetadataKeys = 50

// UpdateCustomer applies the fields that were sent, in one transaction. The
// row is read locked: metadata is merged into what was read, and two
// updates at once would each write back the other's keys lost.
func (s *Store) UpdateCustomer(ctx context.Context, sc Scope, id string, u CustomerUpdate) (*Customer, error) {
	var out Customer
	err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		if err := s.forUpdate(tx).Where("merchant_id = ? AND mode = ? AND id = ?", sc.MerchantID, sc.Mode, id).Take(&out).Error; err != nil {
			return notFound(err)
		}
		fields := map[string]any{}
		if u.Email != nil {
			fields["email"] = *u.Email
		}
		if u.Name != nil {
			fields["name"] = *u.Name
		}
		if u.WalletAddress != nil {
			fields["wallet_address"] = *u.WalletAddress
		}
		if u.Country != nil {
			fields["country"] = *u.Country
		}
		if u.Metadata != nil {
			md := StringMap{}
			for k, v := range out.Metadata {
				md[k] = v
			}
			for k, v := range u.Metadata {
				if v == "" {
					delete(md, k)
				} else {
					md[k] = v
				}
			}
			if len(md) > MaxMetadataKeys {
				return apperr.Invalid("metadata", "must have at most 50 keys")
			}
			fields["metadata"] = md
		}
		if len(fields) == 0 {
			return nil
		}
		fields["updated_at"] = s.Now()
		if err := tx.Model(&Customer{}).Where("id = ?", id).Updates(fields).Error; err != nil {
			if isUniqueViolation(err) {
				return errDuplicateEmail
			}
			return err
		}
		return tx.Where("id = ?", id).Take(&out).Error
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// Customers lists a page of the scope's customers, newest first.
func (s *Store) Customers(ctx context.Context, sc Scope, p Page) ([]Customer, bool, error) {
	return s.CustomerList(ctx, sc, CustomerFilter{}, p)
}

// CustomerFilter narrows the customers list.
type CustomerFilter struct {
	// Search matches part of the e-mail, name or wallet, ignoring case.
	Search string
}

// CustomerList lists a page of the scope's customers, newest first.
func (s *Store) CustomerList(ctx context.Context, sc Scope, f CustomerFilter, p Page) ([]Customer, bool, error) {
	q := s.scoped(ctx, sc)
	if f.Search != "" {
		like := likeContains(f.Search)
		q = q.Where(`(lower(email) LIKE ? ESCAPE '\' OR lower(name) LIKE ? ESCAPE '\' OR lower(wallet_address) LIKE ? ESCAPE '\')`, like, like, like)
	}
	return fetchPage[Customer](q, p)
}
