package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/paygate/paygate/activities"
	"github.com/paygate/paygate/models"
)

// checkoutStore adapts the store to activities.CheckoutStore, so the
// activities do not depend on GORM models.
type checkoutStore struct{ s *models.Store }

func (c checkoutStore) ClaimSessionTxHash(ctx context.Context, sessionID, network, txHash string) error {
	return c.s.ClaimSessionTxHash(ctx, sessionID, network, txHash)
}

func (c checkoutStore) RecordSessionTransition(ctx context.Context, t activities.SessionTransition) error {
	return c.s.RecordSessionTransition(ctx, models.Transition(t))
}

func (c checkoutStore) FinishSession(ctx context.Context, o activities.SessionOutcome) ([]string, error) {
	return c.s.FinishSession(ctx, models.Outcome(o))
}

// deliveryStore adapts the store to activities.DeliveryStore.
type deliveryStore struct{ s *models.Store }

func (d deliveryStore) LoadDeliveryTarget(ctx context.Context, id string) (activities.DeliveryTarget, error) {
	t, err := d.s.DeliveryTarget(ctx, id)
	if errors.Is(err, models.ErrGone) {
		return activities.DeliveryTarget{}, fmt.Errorf("delivery %s: %w", id, activities.ErrDeliveryGone)
	}
	return activities.DeliveryTarget(t), err
}

func (d deliveryStore) RecordDeliveryAttempt(ctx context.Context, a activities.DeliveryAttemptRecord) error {
	err := d.s.RecordDeliveryAttempt(ctx, models.AttemptRecord(a))
	if errors.Is(err, models.ErrGone) {
		return fmt.Errorf("delivery %s: %w", a.DeliveryID, activities.ErrDeliveryGone)
	}
	return err
}
