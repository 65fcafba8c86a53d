package models

import (
	"context"
	"errors"
	"fmt"
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
	Done bool `gorm:"not null;default:false"`
	// Claim names the request that runs the key: the first one, or the
	// retry that took it over. Renewals, the answer and forgetting hold
	// for the request whose claim it is, so a request that was taken over
	// can no longer drop or overwrite the retry's.
	Claim          string `gorm:"size:36;not null;default:''"`
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
	// IdemUnreadable: the same request finished, but its answer is sealed
	// under a server secret no longer configured (rotated, and
	// PAYGATE_SECRET_KEY_PREVIOUS dropped before `paygate secrets rotate`
	// sealed it again): it can neither be answered nor run again (409).
	IdemUnreadable = "unreadable"
)

// idemTakeover is how long a running key may stay unrenewed before a retry
// takes it over (the first request's process died mid-way). A request
// renews its claim every IdemRenewEvery while it runs, so a live request,
// however slow, is never taken over and run twice.
const idemTakeover = time.Minute

// IdemRenewEvery is how often a running request renews its claim.
const IdemRenewEvery = idemTakeover / 4

// ErrIdempotencyLost: the key was taken over by a retry (this request
// stopped renewing its claim for longer than the takeover time); its
// answer is not stored.
var ErrIdempotencyLost = errors.New("idempotency key taken over by a retry")

// BeginIdempotent claims a key for a request, or says what happened to it.
func (s *Store) BeginIdempotent(ctx context.Context, merchantID, scope, key, hash string) (string, *IdempotencyKey, error) {
	now := s.Now()
	rec := IdempotencyKey{ID: NewID(), MerchantID: merchantID, Scope: scope, Key: key, RequestHash: hash, Claim: NewID(),
		CreatedAt: now, UpdatedAt: now}
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
		if errors.Is(err, keyring.ErrUnknownKey) {
			return IdemUnreadable, &cur, nil
		}
		if err != nil {
			return "", nil, err
		}
		cur.ResponseBody = body
		return IdemReplay, &cur, nil
	case now.Sub(cur.UpdatedAt) > idemTakeover:
		claim := NewID()
		res := s.ctx(ctx).Model(&IdempotencyKey{}).Where("id = ? AND done = ? AND claim = ? AND updated_at = ?", cur.ID, false, cur.Claim, cur.UpdatedAt).
			Updates(map[string]any{"claim": claim, "updated_at": now})
		if res.Error != nil {
			return "", nil, res.Error
		}
		if res.RowsAffected == 1 {
			cur.Claim, cur.UpdatedAt = claim, now
			return IdemNew, &cur, nil
		}
	}
	return IdemRunning, &cur, nil
}

// RenewIdempotent tells a key's claim is still running, so no retry takes
// it over. ErrIdempotencyLost: it was taken over (or forgotten) already.
func (s *Store) RenewIdempotent(ctx context.Context, k *IdempotencyKey) error {
	res := s.ctx(ctx).Model(&IdempotencyKey{}).Where("id = ? AND claim = ? AND done = ?", k.ID, k.Claim, false).
		Update("updated_at", s.Now())
	if res.Error == nil && res.RowsAffected == 0 {
		return ErrIdempotencyLost
	}
	return res.Error
}

// FinishIdempotent stores the answer of a key's request, sealed under the
// server secret: an answer may hold what the store otherwise keeps only as
// a hash or sealed (a new API key in full, a webhook endpoint's signing
// secret), and a copy of the database must not give it away.
// ErrIdempotencyLost: the claim was taken over, and the retry that took it
// keeps the key.
func (s *Store) FinishIdempotent(ctx context.Context, k *IdempotencyKey, status int, body string) error {
	if s.secrets != nil {
		sealed, err := s.secrets.Seal(body, idempotentAAD(k.ID))
		if err != nil {
			return err
		}
		body = sealed
	}
	res := s.ctx(ctx).Model(&IdempotencyKey{}).Where("id = ? AND claim = ? AND done = ?", k.ID, k.Claim, false).
		Updates(map[string]any{"done": true, "response_status": status, "response_body": body, "updated_at": s.Now()})
	if res.Error == nil && res.RowsAffected == 0 {
		return ErrIdempotencyLost
	}
	return res.Error
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

// IdemResealResult counts what ResealIdempotentAnswers did.
type IdemResealResult struct {
	Stored, Resealed, Current int
}

// ResealIdempotentAnswers seals every stored answer sealed under a
// previous server secret under the current one (`paygate secrets
// rotate`): kept for 24 hours, they would otherwise be unreadable once
// PAYGATE_SECRET_KEY_PREVIOUS is dropped. It counts the answers looked at
// and those sealed again; each write holds only if the row still keeps
// what was read.
func (s *Store) ResealIdempotentAnswers(ctx context.Context) (IdemResealResult, error) {
	var out IdemResealResult
	if s.secrets == nil {
		return out, errNoKeyring
	}
	var errs []error
	after := ""
	for {
		var rows []IdempotencyKey
		if err := s.ctx(ctx).Select("id", "response_body").Where("done = ? AND id > ?", true, after).
			Order("id").Limit(500).Find(&rows).Error; err != nil {
			return out, errors.Join(append(errs, err)...)
		}
		for _, k := range rows {
			out.Stored++
			if !keyring.IsSealed(k.ResponseBody) {
				continue
			}
			if id, err := keyring.KeyID(k.ResponseBody); err == nil && id == s.secrets.CurrentKeyID() {
				out.Current++
				continue
			}
			body, _, err := s.secrets.Open(k.ResponseBody, idempotentAAD(k.ID))
			if err != nil {
				errs = append(errs, fmt.Errorf("idempotency key %s: %w", k.ID, err))
				continue
			}
			sealed, err := s.secrets.Seal(body, idempotentAAD(k.ID))
			if err != nil {
				return out, err
			}
			res := s.ctx(ctx).Model(&IdempotencyKey{}).Where("id = ? AND response_body = ?", k.ID, k.ResponseBody).
				Update("response_body", sealed)
			if res.Error != nil {
				errs = append(errs, fmt.Errorf("idempotency key %s: %w", k.ID, res.Error))
				continue
			}
			if res.RowsAffected == 1 {
				out.Resealed++
			}
		}
		if len(rows) < 500 {
			return out, errors.Join(errs...)
		}
		after = rows[len(rows)-1].ID
	}
}

// idempotentAAD binds a sealed answer to its key's row (the webhook
// secrets sealed with the same keyring are bound to their endpoints').
func idempotentAAD(id string) string { return "idempotency_keys/" + id }

// ForgetIdempotent drops a key whose request is not remembered (it failed
// validation or the server): a retry runs again. A claim taken over by a
// retry is the retry's: it stays.
func (s *Store) ForgetIdempotent(ctx context.Context, k *IdempotencyKey) error {
	return s.ctx(ctx).Where("id = ? AND claim = ? AND done = ?", k.ID, k.Claim, false).Delete(&IdempotencyKey{}).Error
}

// SweepIdempotencyKeys deletes keys older than before (24 hours).
func (s *Store) SweepIdempotencyKeys(ctx context.Context, before time.Time) (int64, error) {
	res := s.ctx(ctx).Where("created_at < ?", before).Delete(&IdempotencyKey{})
	return res.RowsAffected, res.Error
}
