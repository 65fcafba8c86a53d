package models

import (
	"context"
	"errors"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/paygate/paygate/keyring"
)

// IdempotencyKey remembers the answer to a POST sent with an
// Idempotency-Key, per merchant and scope (the key's mode, or the dashboard),
// for 24 hours: a retry with the same key and body is answered the same.
type IdempotencyKey struct {
	ID          string `gorm:"primaryKey;size:36"`
	MerchantID  string `gorm:"size:36;not null;uniqueIndex:idx_idem_key,priority:1"`
	Scope       string `gorm:"size:16;not null;uniqueIndex:idx_idem_key,priority:2"`
	Key         string `gorm:"size:255;not null;uniqueIndex:idx_idem_key,priority:3"`
	RequestHash string `gorm:"size:64;not null"`
	// Done is false while the first request runs.
	Done           bool `gorm:"not null;default:false"`
	ResponseStatus int
	ResponseBody   string    `gorm:"type:text"`
	CreatedAt      time.Time `gorm:"index"`
	UpdatedAt      time.Time
}

// Idempotency states answered by BeginIdempotent.
const (
	IdemNew      = "new"      // this request runs; finish or forget the key after
	IdemReplay   = "replay"   // the same request finished: answer the stored response
	IdemRunning  = "running"  // the same request is running elsewhere (409)
	IdemMismatch = "mismatch" // the key was used with another request (422)
)

// idemTakeover is how long a running key may stay unfinished before a
// retry takes it over (the first request's process died mid-way).
const idemTakeover = time.Minute

// BeginIdempotent claims a key for a request, or says what happened to it.
func (s *Store) BeginIdempotent(ctx context.Context, merchantID, scope, key, hash string) (string, *IdempotencyKey, error) {
	now := s.Now()
	rec := IdempotencyKey{ID: NewID(), MerchantID: merchantID, Scope: scope, Key: key, RequestHash: hash, CreatedAt: now, UpdatedAt: now}
	res := s.ctx(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&rec)
	if res.Error != nil {
		return "", nil, res.Error
	}
	if res.RowsAffected == 1 {
		return IdemNew, &rec, nil
	}
	var cur IdempotencyKey
	err := s.ctx(ctx).Where("merchant_id = ? AND scope = ? AND key = ?", merchantID, scope, key).Take(&cur).Error
	if errors.Is(err, gorm.ErrRecordNotFound) { // forgotten meanwhile: try once more
		return s.BeginIdempotent(ctx, merchantID, scope, key, hash)
	}
	if err != nil {
		return "", nil, err
	}
	switch {
	case cur.RequestHash != hash:
		return IdemMismatch, &cur, nil
	case cur.Done:
		body, err := s.openIdempotent(&cur)
		if err != nil {
			return "", nil, err
		}
		cur.ResponseBody = body
		return IdemReplay, &cur, nil
	case now.Sub(cur.UpdatedAt) > idemTakeover:
		res := s.ctx(ctx).Model(&IdempotencyKey{}).Where("id = ? AND done = ? AND updated_at = ?", cur.ID, false, cur.UpdatedAt).
			Update("updated_at", now)
		if res.Error != nil {
			return "", nil, res.Error
		}
		if res.RowsAffected == 1 {
			cur.UpdatedAt = now
			return IdemNew, &cur, nil
		}
	}
	return IdemRunning, &cur, nil
}

// FinishIdempotent stores the answer of a key's request, sealed under the
// server secret: an answer may hold what the store otherwise keeps only as
// a hash or sealed (a new API key in full, a webhook endpoint's signing
// secret), and a copy of the database must not give it away.
func (s *Store) FinishIdempotent(ctx context.Context, id string, status int, body string) error {
	if s.secrets != nil {
		sealed, err := s.secrets.Seal(body, idempotentAAD(id))
		if err != nil {
			return err
		}
		body = sealed
	}
	return s.ctx(ctx).Model(&IdempotencyKey{}).Where("id = ?", id).
		Updates(map[string]any{"done": true, "response_status": status, "response_body": body, "updated_at": s.Now()}).Error
}

// openIdempotent is a stored answer in clear. One stored in clear (by an
// older binary, or a store without a keyring) is answered as it is.
func (s *Store) openIdempotent(k *IdempotencyKey) (string, error) {
	if !keyring.IsSealed(k.ResponseBody) {
		return k.ResponseBody, nil
	}
	if s.secrets == nil {
		return "", errNoKeyring
	}
	body, _, err := s.secrets.Open(k.ResponseBody, idempotentAAD(k.ID))
	return body, err
}

// idempotentAAD binds a sealed answer to its key's row (the webhook
// secrets sealed with the same keyring are bound to their endpoints').
func idempotentAAD(id string) string { return "idempotency_keys/" + id }

// ForgetIdempotent drops a key whose request is not remembered (it failed
// validation or the server): a retry runs again.
func (s *Store) ForgetIdempotent(ctx context.Context, id string) error {
	return s.ctx(ctx).Where("id = ? AND done = ?", id, false).Delete(&IdempotencyKey{}).Error
}

// SweepIdempotencyKeys deletes keys older than before (24 hours).
func (s *Store) SweepIdempotencyKeys(ctx context.Context, before time.Time) (int64, error) {
	res := s.ctx(ctx).Where("created_at < ?", before).Delete(&IdempotencyKey{})
	return res.RowsAffected, res.Error
}
