package main

import (
	"context"
	"fmt"
)

// runSecrets serves `paygate secrets rotate`: every webhook endpoint's
// signing secret, and every stored idempotent answer, is sealed again
// under the key derived from the current PAYGATE_SECRET_KEY (opening
// those sealed under a previous one with PAYGATE_SECRET_KEY_PREVIOUS). Run it after rotating the server secret;
// deliveries also re-seal lazily, this finishes the job at once.
func runSecrets(ctx context.Context, args []string) error {
	if len(args) != 1 || args[0] != "rotate" {
		return usageError("secrets needs rotate")
	}
	// Migrating first seals any secret still in clear (migration 0005).
	a, err := newMigratedApp()
	if err != nil {
		return err
	}
	defer a.close()
	res, err := a.store.ResealWebhookSecrets(ctx)
	fmt.Printf("webhook secrets: %d endpoints, %d sealed again under the current PAYGATE_SECRET_KEY, %d already were\n",
		res.Endpoints, res.Resealed, res.Current)
	if err != nil {
		return fmt.Errorf("some webhook secrets could not be opened (is PAYGATE_SECRET_KEY_PREVIOUS set to the old secret?): %w", err)
	}
	idem, ierr := a.store.ResealIdempotentAnswers(ctx)
	fmt.Printf("idempotent answers: %d stored, %d sealed again under the current PAYGATE_SECRET_KEY, %d already were\n",
		idem.Stored, idem.Resealed, idem.Current)
	if ierr != nil {
		return fmt.Errorf("some stored idempotent answers could not be opened (is PAYGATE_SECRET_KEY_PREVIOUS set to the old secret?): %w", ierr)
	}
	if len(a.cfg.SecretKeyPrevious) > 0 {
		fmt.Println("webhook secrets no longer need PAYGATE_SECRET_KEY_PREVIOUS; API keys and dashboard sessions are re-hashed " +
			"when next used, so keep it until those in use have been (an API key never used meanwhile must be regenerated)")
	}
	return nil
}
