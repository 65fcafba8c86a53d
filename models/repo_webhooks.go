package models

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/keyring"
	"gorm.io/gorm"
)

// ErrGone reports a delivery or endpoint that no longer exists.
var ErrGone = errors.New("gone")

// ErrSecretUnopened: an endpoint's signing secret cannot be opened with the
// server's keys (PAYGATE_SECRET_KEY changed without the old one kept as
// PAYGATE_SECRET_KEY_PREVIOUS, or none set). No retry mends it; the
// operator restoring the key, or the merchant rotating the secret, does.
var ErrSecretUnopened = errors.New("the endpoint's signing secret cannot be opened with this server's keys")

// DeliveryTarget is what one delivery attempt sends where.
type DeliveryTarget struct {
	URL    string
	Secret string
	// PreviousSecret is the secret a rotation replaced, while its overlap
	// lasts ("" otherwise): the attempt is signed under both.
	PreviousSecret string
	// Unsigned, when set, says why the attempt cannot be signed (Secret is
	// then empty): it is recorded as a failed attempt, nothing sent.
	Unsigned string
	Body     []byte
	Active   bool
	// Live is true for a live-mode endpoint (held to the strict dial policy).
	Live bool
}

// DeliveryTarget loads a delivery's payload and its endpoint as they are
// now (a rotated secret or a changed URL applies to the next attempt), in
// one query: every attempt of every delivery starts here. A delivery or
// an endpoint that is gone (deleted) is ErrGone.
func (s *Store) DeliveryTarget(ctx context.Context, deliveryID string) (DeliveryTarget, error) {
	var row struct {
		WebhookEndpoint
		DeliveryPayload JSONText
	}
	// The endpoint's model brings its soft-delete condition. Subqueries,
	// not a join: each is a primary-key lookup whatever the statistics say
	// (with many deliveries to a few endpoints PostgreSQL's planner chose a
	// merge join walking the endpoints' index for the join).
	res := s.ctx(ctx).Model(&WebhookEndpoint{}).
		Select("webhook_endpoints.*, (SELECT payload FROM webhook_deliveries WHERE id = ?) AS delivery_payload", deliveryID).
		Where("id = (SELECT endpoint_id FROM webhook_deliveries WHERE id = ?)", deliveryID).Find(&row)
	if res.Error != nil {
		return DeliveryTarget{}, res.Error
	}
	if res.RowsAffected == 0 {
		return DeliveryTarget{}, ErrGone
	}
	ep := &row.WebhookEndpoint
	secret, err := s.openSecret(ctx, ep)
	if errors.Is(err, ErrSecretUnopened) {
		// A failed attempt the merchant sees, on the usual schedule: as a
		// store error it was retried an hour per attempt, never recorded,
		// and the reconciler began the schedule again, for ever.
		return DeliveryTarget{URL: ep.URL, Unsigned: ErrSecretUnopened.Error(), Body: row.DeliveryPayload, Active: ep.Active,
			Live: ep.Mode == ModeLive}, nil
	}
	if err != nil {
		return DeliveryTarget{}, err
	}
	return DeliveryTarget{URL: ep.URL, Secret: secret, PreviousSecret: s.previousSecret(ep), Body: row.DeliveryPayload,
		Active: ep.Active, Live: ep.Mode == ModeLive}, nil
}

// previousSecret opens the secret a rotation replaced while its overlap
// lasts. One that no key of the ring opens any more (the server secret was
// rotated twice within the overlap) is left out: the attempt still carries
// the current secret's signature.
func (s *Store) previousSecret(ep *WebhookEndpoint) string {
	if !ep.PreviousSecretSigns(s.Now()) || s.secrets == nil {
		return ""
	}
	secret, _, err := s.secrets.Open(ep.PreviousSecretSealed, previousSecretAAD(ep.ID))
	if err != nil {
		return ""
	}
	return secret
}

// errNoKeyring: the store was opened without a keyring, so endpoint
// secrets can be neither sealed nor opened.
var errNoKeyring = errors.New("models: no keyring for webhook secrets (PAYGATE_SECRET_KEY)")

// secretAAD binds a sealed secret to its endpoint row.
func secretAAD(endpointID string) string { return "webhook_endpoints/" + endpointID }

// previousSecretAAD binds a replaced secret to its endpoint row and column:
// it opens as the previous secret only.
func previousSecretAAD(endpointID string) string {
	return "webhook_endpoints/" + endpointID + "/previous"
}

func (s *Store) sealSecret(endpointID, secret string) (string, error) {
	if s.secrets == nil {
		return "", errNoKeyring
	}
	return s.secrets.Seal(secret, secretAAD(endpointID))
}

// openSecret returns an endpoint's secret in clear. A secret sealed under a
// previous server secret, or still in clear (written by an older binary),
// is sealed under the current key on the way (lazy re-encryption; a failed
// write is retried at the next use).
func (s *Store) openSecret(ctx context.Context, ep *WebhookEndpoint) (string, error) {
	secret, stale, err := s.openCurrentSecret(ep)
	if err != nil {
		return "", err
	}
	if stale {
		_, _ = s.resealEndpoint(ctx, ep.ID, ep.SecretSealed, ep.LegacySecret, secret)
	}
	return secret, nil
}

// openCurrentSecret opens an endpoint's secret as read; stale says it is
// not sealed under the current key.
func (s *Store) openCurrentSecret(ep *WebhookEndpoint) (secret string, stale bool, err error) {
	if s.secrets == nil {
		return "", false, fmt.Errorf("%w (%w)", ErrSecretUnopened, errNoKeyring)
	}
	switch {
	case ep.SecretSealed != "":
		secret, stale, err = s.secrets.Open(ep.SecretSealed, secretAAD(ep.ID))
		if err != nil {
			return "", false, fmt.Errorf("%w (webhook endpoint %s: %w)", ErrSecretUnopened, ep.ID, err)
		}
		return secret, stale, nil
	case ep.LegacySecret != "":
		return ep.LegacySecret, true, nil
	}
	return "", false, fmt.Errorf("%w (webhook endpoint %s: no secret stored)", ErrSecretUnopened, ep.ID)
}

// resealEndpoint writes secret sealed under the current key, provided the
// row still holds what was read (a rotation in between wins).
func (s *Store) resealEndpoint(ctx context.Context, id, sealedWas, legacyWas, secret string) (bool, error) {
	sealed, err := s.sealSecret(id, secret)
	if err != nil {
		return false, err
	}
	res := s.ctx(ctx).Unscoped().Model(&WebhookEndpoint{}).
		Where("id = ? AND COALESCE(secret_sealed, '') = ? AND secret = ?", id, sealedWas, legacyWas).
		Updates(map[string]any{"secret_sealed": sealed, "secret": ""})
	return res.RowsAffected > 0, res.Error
}

// EndpointSecret opens one endpoint's signing secret (operators and tests;
// deliveries get it through DeliveryTarget).
func (s *Store) EndpointSecret(ctx context.Context, endpointID string) (string, error) {
	var ep WebhookEndpoint
	if err := s.ctx(ctx).Where("id = ?", endpointID).Take(&ep).Error; err != nil {
		return "", notFound(err)
	}
	return s.openSecret(ctx, &ep)
}

// ResealResult counts what ResealWebhookSecrets did.
type ResealResult struct {
	// Endpoints is how many endpoints (deleted ones included) were looked at.
	Endpoints int
	// Resealed counts secrets sealed again under the current key (they were
	// under a previous server secret, or in clear).
	Resealed int
	// Current counts secrets already under the current key.
	Current int
}

// ResealWebhookSecrets seals every endpoint's secret under the current key
// (`paygate secrets rotate`): after it, PAYGATE_SECRET_KEY_PREVIOUS is no
// longer needed to open any of them. A secret that opens with no key of the
// ring is an error naming the endpoint; the others are still done.
func (s *Store) ResealWebhookSecrets(ctx context.Context) (ResealResult, error) {
	var out ResealResult
	if s.secrets == nil {
		return out, errNoKeyring
	}
	var rows []WebhookEndpoint
	if err := s.ctx(ctx).Unscoped().Order("id").Find(&rows).Error; err != nil {
		return out, err
	}
	var errs []error
	for i := range rows {
		ep := &rows[i]
		out.Endpoints++
		switch ok, err := s.resealPrevious(ctx, ep); {
		case err != nil:
			errs = append(errs, fmt.Errorf("webhook endpoint %s: previous secret: %w", ep.ID, err))
		case ok:
			out.Resealed++
		}
		if ep.SecretSealed != "" {
			if id, err := keyring.KeyID(ep.SecretSealed); err == nil && id == s.secrets.CurrentKeyID() && ep.LegacySecret == "" {
				out.Current++
				continue
			}
		}
		secret := ep.LegacySecret
		if ep.SecretSealed != "" {
			var err error
			if secret, _, err = s.secrets.Open(ep.SecretSealed, secretAAD(ep.ID)); err != nil {
				errs = append(errs, fmt.Errorf("webhook endpoint %s: %w", ep.ID, err))
				continue
			}
		}
		if secret == "" {
			continue
		}
		ok, err := s.resealEndpoint(ctx, ep.ID, ep.SecretSealed, ep.LegacySecret, secret)
		if err != nil {
			errs = append(errs, fmt.Errorf("webhook endpoint %s: %w", ep.ID, err))
			continue
		}
		if ok {
			out.Resealed++
		}
	}
	return out, errors.Join(errs...)
}

// resealPrevious seals a rotated secret still in its overlap under the
// current key, and drops one whose overlap has passed. Both writes hold
// only if the row still keeps what was read (a rotation in between wins).
func (s *Store) resealPrevious(ctx context.Context, ep *WebhookEndpoint) (bool, error) {
	if ep.PreviousSecretSealed == "" {
		return false, nil
	}
	unchanged := s.ctx(ctx).Unscoped().Model(&WebhookEndpoint{}).Where("id = ? AND previous_secret_sealed = ?", ep.ID, ep.PreviousSecretSealed)
	if !ep.PreviousSecretSigns(s.Now()) {
		return false, unchanged.Updates(map[string]any{"previous_secret_sealed": "", "previous_secret_until": nil}).Error
	}
	if id, err := keyring.KeyID(ep.PreviousSecretSealed); err == nil && id == s.secrets.CurrentKeyID() {
		return false, nil
	}
	secret, _, err := s.secrets.Open(ep.PreviousSecretSealed, previousSecretAAD(ep.ID))
	if err != nil {
		return false, err
	}
	sealed, err := s.secrets.Seal(secret, previousSecretAAD(ep.ID))
	if err != nil {
		return false, err
	}
	res := unchanged.Update("previous_secret_sealed", sealed)
	return res.RowsAffected > 0, res.Error
}

// AttemptRecord is one delivery attempt to store.
type AttemptRecord struct {
	DeliveryID     string
	Attempt        int
	ResponseStatus int
	At             time.Time
	Status         string
	Error          string
	// Slot is the attempt's place in the retry schedule, 0 for an extra
	// attempt; the delivery's scheduled_attempts keeps the highest.
	Slot int
}

// RecordDeliveryAttempt stores one attempt, once per (delivery, attempt),
// and moves the delivery's read model: attempts is the highest attempt
// number, status/responseStatus/lastAttemptAt follow the highest attempt,
// and delivered is never downgraded. Every attempt of every delivery ends
// here, so the read model moves in one conditional UPDATE (no read of the
// row first) and the attempt row follows it in the same transaction.
func (s *Store) RecordDeliveryAttempt(ctx context.Context, a AttemptRecord) error {
	var status *int
	if a.ResponseStatus > 0 {
		v := a.ResponseStatus
		status = &v
	}
	at := a.At.UTC()
	next := gorm.Expr("CASE WHEN status = ? THEN status ELSE ? END", DeliveryDelivered, a.Status)
	if a.Status == DeliveryPending {
		// An attempt that was in flight while its endpoint was deleted
		// must not reopen the delivery: no attempt will follow.
		next = gorm.Expr(`CASE WHEN status = ? THEN status
			WHEN EXISTS (SELECT 1 FROM webhook_endpoints WHERE webhook_endpoints.id = webhook_deliveries.endpoint_id
				AND webhook_endpoints.deleted_at IS NULL) THEN ? ELSE ? END`, DeliveryDelivered, DeliveryPending, DeliveryFailed)
	}
	// Both statements go together (one round trip on PostgreSQL, as one
	// transaction): the attempt row is written for a delivery that
	// exists, also when its update changes nothing (an older attempt
	// recorded late); neither writing means the delivery is gone.
	dry := s.dry(ctx)
	fields := map[string]any{"attempts": a.Attempt, "response_status": status, "last_attempt_at": at, "updated_at": s.Now(), "status": next}
	if a.Slot > 0 {
		fields["scheduled_attempts"] = gorm.Expr("CASE WHEN scheduled_attempts < ? THEN ? ELSE scheduled_attempts END", a.Slot, a.Slot)
	}
	update, uerr := built(dry.Model(&WebhookDelivery{}).Where("id = ? AND attempts <= ?", a.DeliveryID, a.Attempt).
		Updates(fields))
	attempt, aerr := built(dry.Exec(`INSERT INTO delivery_attempts (delivery_id, attempt, response_status, error, attempted_at)
		SELECT ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM webhook_deliveries WHERE id = ?)
		ON CONFLICT (delivery_id, attempt) DO UPDATE SET response_status = excluded.response_status, error = excluded.error,
			attempted_at = excluded.attempted_at`, a.DeliveryID, a.Attempt, status, truncate(a.Error, 500), at, a.DeliveryID))
	if err := errors.Join(uerr, aerr); err != nil {
		return err
	}
	rows, err := s.pipeline(ctx, []pending{update, attempt})
	if err != nil {
		return err
	}
	if rows[0] == 0 && rows[1] == 0 {
		return ErrGone
	}
	return nil
}

// WebhookDeliveryOfMerchant loads one of the merchant's deliveries.
func (s *Store) WebhookDeliveryOfMerchant(ctx context.Context, merchantID, id string) (*WebhookDelivery, error) {
	var d WebhookDelivery
	err := s.ctx(ctx).Where("merchant_id = ? AND id = ?", merchantID, id).Take(&d).Error
	return &d, notFound(err)
}

// WebhookDelivery loads a delivery by id (operator commands).
func (s *Store) WebhookDelivery(ctx context.Context, id string) (*WebhookDelivery, error) {
	var d WebhookDelivery
	err := s.ctx(ctx).Where("id = ?", id).Take(&d).Error
	return &d, notFound(err)
}

// CreateWebhookEndpoint stores an endpoint; ep.Secret, in clear, is stored
// sealed (SecretSealed). It is RegisterWebhookEndpoint without a limit.
func (s *Store) CreateWebhookEndpoint(ctx context.Context, ep *WebhookEndpoint) error {
	return s.RegisterWebhookEndpoint(ctx, ep, 0)
}

// RegisterWebhookEndpoint stores an endpoint unless its merchant has max
// endpoints in its mode already (max > 0; a 400 naming mode) or one at the
// same URL (a 409: every event would reach the receiver twice, under two
// delivery ids its deduplication cannot match). Both are checked and the
// row written under the merchant's row lock, so concurrent registrations
// cannot pass either check together.
func (s *Store) RegisterWebhookEndpoint(ctx context.Context, ep *WebhookEndpoint, max int) error {
	now := s.Now()
	ep.ID, ep.CreatedAt, ep.UpdatedAt, ep.Active = NewID(), now, now, true
	sealed, err := s.sealSecret(ep.ID, ep.Secret)
	if err != nil {
		return err
	}
	ep.SecretSealed, ep.LegacySecret = sealed, ""
	return s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		if err := s.lockMerchant(tx, ep.MerchantID); err != nil {
			return err
		}
		if max > 0 {
			var n int64
			if err := tx.Model(&WebhookEndpoint{}).Where("merchant_id = ? AND mode = ?", ep.MerchantID, ep.Mode).Count(&n).Error; err != nil {
				return err
			}
			if n >= int64(max) {
				return apperr.Invalid("mode", fmt.Sprintf("at most %d webhook endpoints per mode (delete one first)", max))
			}
		}
		if err := endpointURLFree(tx, ep.MerchantID, ep.Mode, ep.URL, ""); err != nil {
			return err
		}
		return tx.Create(ep).Error
	})
}

// lockMerchant serialises a merchant's checked writes (its endpoint list,
// its payouts): PostgreSQL locks the merchant's row, FOR UPDATE; SQLite
// has one writer.
//
// After the lock it checks that the credential the request was admitted
// with (WithCredential on tx's context, when set) still holds: a write
// that was admitted before a password reset took the account back
// (ResetPassword's reclaim, under the same lock) must not land after it.
func (s *Store) lockMerchant(tx *gorm.DB, merchantID string) error {
	var m Merchant
	if err := s.forUpdate(tx).Select("id").Where("id = ?", merchantID).Take(&m).Error; err != nil {
		return notFound(err)
	}
	return s.credentialHolds(tx, merchantID)
}

// endpointURLFree is a 409 when another endpoint of the merchant's mode
// (not except) has url.
func endpointURLFree(tx *gorm.DB, merchantID string, mode Mode, url, except string) error {
	var n int64
	q := tx.Model(&WebhookEndpoint{}).Where("merchant_id = ? AND mode = ? AND url = ?", merchantID, mode, url)
	if except != "" {
		q = q.Where("id <> ?", except)
	}
	if err := q.Count(&n).Error; err != nil {
		return err
	}
	if n > 0 {
		return apperr.WithHint(apperr.ErrConflict, fmt.Sprintf("a %s webhook endpoint with this URL exists already", mode),
			"change or delete that endpoint instead: two endpoints at one URL would receive every event twice")
	}
	return nil
}

// WebhookEndpoints lists the merchant's endpoints of a mode, newest first.
func (s *Store) WebhookEndpoints(ctx context.Context, sc Scope) ([]WebhookEndpoint, error) {
	var rows []WebhookEndpoint
	err := s.scoped(ctx, sc).Order("id desc").Find(&rows).Error
	return rows, err
}

// WebhookEndpoint loads one of the merchant's endpoints (any mode).
func (s *Store) WebhookEndpoint(ctx context.Context, merchantID, id string) (*WebhookEndpoint, error) {
	var ep WebhookEndpoint
	err := s.ctx(ctx).Where("merchant_id = ? AND id = ?", merchantID, id).Take(&ep).Error
	return &ep, notFound(err)
}

// WebhookEndpointUpdate holds the fields PATCH may change.
type WebhookEndpointUpdate struct {
	URL    *string
	Events []string
	Active *bool
}

// MaxSecretOverlap bounds how long a rotated secret may keep signing
// beside its successor.
const MaxSecretOverlap = 7 * 24 * time.Hour

// RotateWebhookSecret replaces one of the merchant's endpoint secrets with
// secret (in clear; stored sealed). With overlap > 0 the replaced secret
// keeps signing beside the new one until overlap has passed; with 0 it
// stops at once, and so does any secret an earlier rotation kept (a leaked
// secret is revoked by rotating with no overlap). One rotation replaces
// another's kept secret: at most two sign at a time. The answer carries
// the new secret in clear, to be shown once.
func (s *Store) RotateWebhookSecret(ctx context.Context, merchantID, id, secret string, overlap time.Duration) (*WebhookEndpoint, error) {
	if overlap < 0 || overlap > MaxSecretOverlap {
		return nil, fmt.Errorf("models: secret overlap %s outside 0 to %s", overlap, MaxSecretOverlap)
	}
	sealed, err := s.sealSecret(id, secret)
	if err != nil {
		return nil, err
	}
	var ep WebhookEndpoint
	err = s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		// The row is read and written under its lock: two rotations at
		// once each keep the secret they replaced, never one of them a
		// secret nobody was shown.
		if err := s.forUpdate(tx).Where("merchant_id = ? AND id = ?", merchantID, id).Take(&ep).Error; err != nil {
			return notFound(err)
		}
		now := s.Now()
		fields := map[string]any{"secret_sealed": sealed, "secret": "", "updated_at": now,
			"previous_secret_sealed": "", "previous_secret_until": nil}
		replaced, _, err := "", false, error(nil)
		if overlap > 0 {
			replaced, _, err = s.openCurrentSecret(&ep)
		}
		// A secret the server's keys no longer open signs nothing: the
		// rotation mends the endpoint, with no overlap to keep (it was a
		// 500, and only a rotation without overlap mended it).
		if errors.Is(err, ErrSecretUnopened) {
			overlap = 0
		} else if err != nil {
			return err
		}
		if overlap > 0 {
			kept, err := s.secrets.Seal(replaced, previousSecretAAD(id))
			if err != nil {
				return err
			}
			until := now.Add(overlap)
			fields["previous_secret_sealed"], fields["previous_secret_until"] = kept, until
		}
		return tx.Model(&WebhookEndpoint{}).Where("id = ?", id).Updates(fields).Error
	})
	if err != nil {
		return nil, err
	}
	out, err := s.WebhookEndpoint(ctx, merchantID, id)
	if err == nil {
		out.Secret = secret
	}
	return out, err
}

// UpdateWebhookEndpoint applies the fields that were sent. A URL another
// endpoint of the mode has is a 409 (RegisterWebhookEndpoint).
func (s *Store) UpdateWebhookEndpoint(ctx context.Context, merchantID, id string, u WebhookEndpointUpdate) (*WebhookEndpoint, error) {
	if u.URL != nil {
		var out *WebhookEndpoint
		err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
			if err := s.lockMerchant(tx, merchantID); err != nil {
				return err
			}
			var ep WebhookEndpoint
			if err := tx.Where("merchant_id = ? AND id = ?", merchantID, id).Take(&ep).Error; err != nil {
				return notFound(err)
			}
			if err := endpointURLFree(tx, merchantID, ep.Mode, *u.URL, id); err != nil {
				return err
			}
			var err error
			out, err = s.updateWebhookEndpoint(tx, merchantID, id, u)
			return err
		})
		return out, err
	}
	return s.updateWebhookEndpoint(s.ctx(ctx), merchantID, id, u)
}

func (s *Store) updateWebhookEndpoint(db *gorm.DB, merchantID, id string, u WebhookEndpointUpdate) (*WebhookEndpoint, error) {
	fields := map[string]any{"updated_at": s.Now()}
	if u.URL != nil {
		fields["url"] = *u.URL
	}
	if u.Events != nil {
		fields["events"] = StringList(u.Events)
	}
	if u.Active != nil {
		fields["active"] = *u.Active
	}
	res := db.Model(&WebhookEndpoint{}).Where("merchant_id = ? AND id = ?", merchantID, id).Updates(fields)
	if res.Error != nil {
		return nil, res.Error
	}
	if res.RowsAffected == 0 {
		return nil, apperr.NotFound()
	}
	var ep WebhookEndpoint
	err := db.Where("merchant_id = ? AND id = ?", merchantID, id).Take(&ep).Error
	return &ep, notFound(err)
}

// DeleteWebhookEndpoint removes an endpoint. Its pending deliveries can no
// longer be delivered, so the read model marks them failed at once; their
// workflows stop as gone at their next attempt.
func (s *Store) DeleteWebhookEndpoint(ctx context.Context, merchantID, id string) error {
	return s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Where("merchant_id = ? AND id = ?", merchantID, id).Delete(&WebhookEndpoint{})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return apperr.NotFound()
		}
		return tx.Model(&WebhookDelivery{}).Where("endpoint_id = ? AND status = ?", id, DeliveryPending).
			Updates(map[string]any{"status": DeliveryFailed, "updated_at": s.Now()}).Error
	})
}

// DeliveryFilter narrows the events list.
type DeliveryFilter struct {
	Event        string
	Status       string
	EndpointID   string
	SessionID    string
	Since, Until *time.Time
}

// WebhookDeliveries lists a page of the scope's deliveries, newest first.
func (s *Store) WebhookDeliveries(ctx context.Context, sc Scope, f DeliveryFilter, p Page) ([]WebhookDelivery, bool, error) {
	q := equal(s.scoped(ctx, sc), "event", f.Event, "status", f.Status, "endpoint_id", f.EndpointID, "session_id", f.SessionID)
	return fetchPage[WebhookDelivery](createdBetween(q, f.Since, f.Until), p)
}

// DeliveryAttempts lists the attempts of deliveries, each in order.
func (s *Store) DeliveryAttempts(ctx context.Context, deliveryIDs []string) (map[string][]DeliveryAttempt, error) {
	out := map[string][]DeliveryAttempt{}
	if len(deliveryIDs) == 0 {
		return out, nil
	}
	var rows []DeliveryAttempt
	if err := s.ctx(ctx).Where("delivery_id IN ?", deliveryIDs).Order("delivery_id, attempt").Find(&rows).Error; err != nil {
		return nil, err
	}
	for _, r := range rows {
		out[r.DeliveryID] = append(out[r.DeliveryID], r)
	}
	return out, nil
}

// EndpointURLs maps the merchant's endpoint ids to their URLs, deleted
// endpoints included (the delivery log still names them).
func (s *Store) EndpointURLs(ctx context.Context, merchantID string, ids []string) (map[string]string, error) {
	out := map[string]string{}
	if len(ids) == 0 {
		return out, nil
	}
	var eps []WebhookEndpoint
	if err := s.ctx(ctx).Unscoped().Select("id", "url").Where("merchant_id = ? AND id IN ?", merchantID, ids).Find(&eps).Error; err != nil {
		return nil, err
	}
	for _, e := range eps {
		out[e.ID] = e.URL
	}
	return out, nil
}

// UnattemptedDeliveries lists up to limit pending deliveries created before
// createdBefore that no attempt was ever made for, oldest first: most of
// them are dispatches lost in a crash, which the reconciler looks at first
// in every pass instead of in their turn among deliveries waiting for their
// next slot (a partial index holds them alone).
func (s *Store) UnattemptedDeliveries(ctx context.Context, createdBefore time.Time, limit int) ([]WebhookDelivery, error) {
	var rows []WebhookDelivery
	err := s.ctx(ctx).Where("status = ? AND attempts = 0 AND created_at < ?", DeliveryPending, createdBefore.UTC()).
		Order("id").Limit(limit).Find(&rows).Error
	return rows, err
}

// PendingDeliveries lists up to limit pending deliveries created before
// createdBefore whose id sorts after afterID, in id order (creation order),
// for the delivery reconciler, which walks them with afterID as a cursor.
func (s *Store) PendingDeliveries(ctx context.Context, afterID string, createdBefore time.Time, limit int) ([]WebhookDelivery, error) {
	var rows []WebhookDelivery
	err := s.ctx(ctx).Where("status = ? AND created_at < ? AND id > ?", DeliveryPending, createdBefore.UTC(), afterID).
		Order("id").Limit(limit).Find(&rows).Error
	return rows, err
}

// SettleDelivery moves a delivery that is still pending to status
// (delivered or failed): the reconciler's answer when the delivery's
// workflow ended with a verdict the read model did not receive. It reports
// whether the row changed; a delivery already settled is left alone.
func (s *Store) SettleDelivery(ctx context.Context, id, status string) (bool, error) {
	if status != DeliveryDelivered && status != DeliveryFailed {
		return false, fmt.Errorf("settle delivery %s: status %q is not final", id, status)
	}
	res := s.ctx(ctx).Model(&WebhookDelivery{}).Where("id = ? AND status = ?", id, DeliveryPending).
		Updates(map[string]any{"status": status, "updated_at": s.Now()})
	return res.RowsAffected > 0, res.Error
}
