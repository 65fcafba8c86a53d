package models_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
)

// TestReviewNamesTheRevision: a decision naming the revision the operator
// read is refused once the merchant edited the application, nothing
// decided; naming the current one, it is taken. Before, an approval applied
// to whatever the application said at that moment (found by an audit
// helper: "Honest Shop GmbH, DE" read, "Other Business Ltd, KP" approved).
func TestReviewNamesTheRevision(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "revision@x.io")
		if err := st.SubmitKYB(ctx, &models.KYBApplication{MerchantID: m.ID, BusinessName: "Honest Shop GmbH", BusinessType: "GmbH",
			Country: "DE", ContactName: "Ann", ContactEmail: "ann@shop.example"}); err != nil {
			t.Fatal(err)
		}
		read, err := st.KYB(ctx, m.ID)
		if err != nil {
			t.Fatal(err)
		}
		if again, _ := st.KYB(ctx, m.ID); again.Revision() != read.Revision() {
			t.Fatalf("the revision moved on its own: %s, %s", read.Revision(), again.Revision())
		}
		time.Sleep(2 * time.Millisecond)
		if _, err := st.UpdateKYB(ctx, m.ID, map[string]any{"business_name": "Other Business Ltd", "country": "KP"}); err != nil {
			t.Fatal(err)
		}
		notice := func() *models.Notification {
			return &models.Notification{Kind: "kyb.reviewed", Subject: "s", Body: "b"}
		}
		if _, err := st.ReviewKYB(ctx, m.ID, true, "", read.Revision(), notice()); !errors.Is(err, apperr.ErrConflict) {
			t.Fatalf("approval of the revision read before the edit: %v", err)
		}
		if now, _ := st.Merchant(ctx, m.ID); now.KYBStatus != models.KYBPending {
			t.Fatalf("the refused approval left %s", now.KYBStatus)
		}
		edited, _ := st.KYB(ctx, m.ID)
		app, err := st.ReviewKYB(ctx, m.ID, false, "country not served", edited.Revision(), notice())
		if err != nil || app.Status != models.KYBRejected || app.Country != "KP" {
			t.Fatalf("decision on the current revision: %+v %v", app, err)
		}
	})
}
