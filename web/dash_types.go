package web

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/paygate/paygate/models"
)

// The API's answers as the dashboard reads them (api/openapi.yaml).
// Amounts stay the exact decimal text the API printed.

type dMerchant struct {
	ID             string `json:"id"`
	Email          string `json:"email"`
	EmailConfirmed bool   `json:"emailConfirmed"`
	BusinessName   string `json:"businessName"`
	Wallets        struct{ EVM, Solana string }
	LogoURL        string   `json:"logoUrl"`
	EmbedOrigins   []string `json:"embedOrigins"`
	KYBStatus      string   `json:"kybStatus"`
	// RefundsEnabled says in which modes the merchant may create refunds
	// (an operator's decision).
	RefundsEnabled struct{ Test, Live bool } `json:"refundsEnabled"`
}

// LiveAllowed says whether the merchant may act in live mode.
func (m dMerchant) LiveAllowed() bool { return m.KYBStatus == "approved" }

// RefundsOn says whether the merchant may create refunds in mode.
func (m dMerchant) RefundsOn(mode string) bool {
	if mode == "live" {
		return m.RefundsEnabled.Live
	}
	return m.RefundsEnabled.Test
}

type dLink struct {
	ID                      string            `json:"id"`
	Name                    string            `json:"name"`
	Description             string            `json:"description"`
	Amount                  json.Number       `json:"amount"`
	Currency                string            `json:"currency"`
	Network                 string            `json:"network"`
	Networks                []string          `json:"networks"`
	Token                   string            `json:"token"`
	Active                  bool              `json:"active"`
	MerchantWalletAddresses map[string]string `json:"merchantWalletAddresses"`
	TotalCollected          json.Number       `json:"totalCollected"`
	TotalTransactions       int64             `json:"totalTransactions"`
	TotalRefunded           json.Number       `json:"totalRefunded"`
	CreatedAt               time.Time         `json:"createdAt"`
	UpdatedAt               time.Time         `json:"updatedAt"`
}

type dPayment struct {
	ID              string      `json:"id"`
	Kind            string      `json:"kind"`
	Status          string      `json:"status"`
	Amount          json.Number `json:"amount"`
	Token           string      `json:"token"`
	Network         string      `json:"network"`
	PaymentLinkID   *string     `json:"paymentLinkId"`
	PaymentLinkName string      `json:"paymentLinkName"`
	TxHash          *string     `json:"txHash"`
	WalletAddress   string      `json:"walletAddress"`
	CustomerEmail   string      `json:"customerEmail"`
	CustomerName    string      `json:"customerName"`
	SessionID       *string     `json:"sessionId"`
	TransactionID   *string     `json:"transactionId"`
	FailureReason   string      `json:"failureReason"`
	Verification    string      `json:"verification"`
	CreatedAt       time.Time   `json:"createdAt"`
}

type dSession struct {
	ID             string      `json:"id"`
	PaymentLinkID  string      `json:"paymentLinkId"`
	WalletAddress  string      `json:"walletAddress"`
	Network        string      `json:"network"`
	ExpectedAmount json.Number `json:"expectedAmount"`
	Status         string      `json:"status"`
	Customer       *struct {
		Name    string `json:"name"`
		Email   string `json:"email"`
		Address string `json:"address"`
		Country string `json:"country"`
	} `json:"customer"`
	TxHash                *string   `json:"txHash"`
	FailureReason         string    `json:"failureReason"`
	FailureMessage        string    `json:"failureMessage"`
	MerchantWalletAddress string    `json:"merchantWalletAddress"`
	ExpiresAt             time.Time `json:"expiresAt"`
	CreatedAt             time.Time `json:"createdAt"`
}

type dHistory struct {
	ID        string    `json:"id"`
	Status    string    `json:"status"`
	Source    string    `json:"source"`
	Chain     string    `json:"chain"`
	CreatedAt time.Time `json:"createdAt"`
}

type dTransaction struct {
	ID                    string      `json:"id"`
	Amount                json.Number `json:"amount"`
	Token                 string      `json:"token"`
	Network               string      `json:"network"`
	Status                string      `json:"status"`
	CustomerEmail         string      `json:"customerEmail"`
	CustomerName          string      `json:"customerName"`
	CustomerID            *string     `json:"customerId"`
	TxHash                string      `json:"txHash"`
	WalletAddress         string      `json:"walletAddress"`
	MerchantWalletAddress string      `json:"merchantWalletAddress"`
	Source                string      `json:"source"`
	Verification          string      `json:"verification"`
	VerificationMessage   string      `json:"verificationMessage"`
	CreatedAt             time.Time   `json:"createdAt"`
	// The refunds, read from the transaction's own route (the payment's
	// detail does not carry them).
	RefundedAmount   json.Number `json:"refundedAmount"`
	RefundableAmount json.Number `json:"refundableAmount"`
	Refunds          []dRefund   `json:"refunds"`
}

// CanRefund says whether anything is left to refund.
func (t dTransaction) CanRefund() bool {
	return strings.Trim(string(t.RefundableAmount), "0.") != ""
}

type dRefund struct {
	ID                string      `json:"id"`
	Amount            json.Number `json:"amount"`
	Token             string      `json:"token"`
	Network           string      `json:"network"`
	DestinationWallet string      `json:"destinationWallet"`
	SourceWallet      string      `json:"sourceWallet"`
	Status            string      `json:"status"`
	TxHash            *string     `json:"txHash"`
	Reason            *string     `json:"reason"`
	InitiatedBy       string      `json:"initiatedBy"`
	FailureReason     *string     `json:"failureReason"`
	FailureMessage    *string     `json:"failureMessage"`
	TokenAddress      string      `json:"tokenAddress"`
	AmountUnits       string      `json:"amountUnits"`
	ExpiresAt         time.Time   `json:"expiresAt"`
	FailedAt          *time.Time  `json:"failedAt"`
	WatchedUntil      *time.Time  `json:"watchedUntil"`
	AmountHeld        bool        `json:"amountHeld"`
	CreatedAt         time.Time   `json:"createdAt"`
}

// Watched says the refund failed while a transfer sent for it is still
// watched (not found in time, or replaced by a re-send that failed):
// landing, it makes the refund succeeded. Its amount is held meanwhile
// (AmountHeld), or, on a refund failed before amounts were held, free, and
// a new refund of it would pay twice.
func (r dRefund) Watched() bool {
	return r.Status == "failed" && r.WatchedUntil != nil && (r.AmountHeld || time.Now().Before(*r.WatchedUntil))
}

// LateUntil is, for a refund that failed REFUND_EXPIRED without a
// transfer, until when a transfer sent for it late is still found on chain
// (and makes it succeeded): a week after its window (the worker's
// models.ExpiredRefundWatch); zero otherwise, or once that has passed.
func (r dRefund) LateUntil() time.Time {
	if r.Status != "failed" || r.TxHash != nil || r.FailureReason == nil || *r.FailureReason != models.ReasonRefundExpired {
		return time.Time{}
	}
	if until := r.ExpiresAt.Add(models.ExpiredRefundWatch); time.Now().Before(until) {
		return until
	}
	return time.Time{}
}

// WatchEnded says the watch's end has passed while the refund still holds
// its amount (its workflow ends the watch shortly, or, gone, the repair
// pass gives the amount back).
func (r dRefund) WatchEnded() bool {
	return r.WatchedUntil != nil && !time.Now().Before(*r.WatchedUntil)
}

type dPaymentDetail struct {
	Payment       dPayment      `json:"payment"`
	Session       *dSession     `json:"session"`
	Events        []dHistory    `json:"events"`
	Transaction   *dTransaction `json:"transaction"`
	Confirmations *struct {
		Count    uint64 `json:"count"`
		Required uint64 `json:"required"`
	} `json:"confirmations"`
}

type dCustomer struct {
	ID               string            `json:"id"`
	Email            string            `json:"email"`
	Name             string            `json:"name"`
	WalletAddress    string            `json:"walletAddress"`
	Country          string            `json:"country"`
	Metadata         map[string]string `json:"metadata"`
	TotalSpent       json.Number       `json:"totalSpent"`
	TransactionCount int64             `json:"transactionCount"`
	TotalRefunded    json.Number       `json:"totalRefunded"`
	CreatedAt        time.Time         `json:"createdAt"`
}

// dSignedIn is one signed-in session of the account on the settings page.
type dSignedIn struct {
	ID        string    `json:"id"`
	Current   bool      `json:"current"`
	CreatedAt time.Time `json:"createdAt"`
	ExpiresAt time.Time `json:"expiresAt"`
	UserAgent string    `json:"userAgent"`
	IPAddress string    `json:"ipAddress"`
}

type dSubscription struct {
	ID                    string      `json:"id"`
	Status                string      `json:"status"`
	Network               string      `json:"network"`
	CustomerEmail         string      `json:"customerEmail"`
	CustomerID            *string     `json:"customerId"`
	CustomerWalletAddress string      `json:"customerWalletAddress"`
	ProductName           string      `json:"productName"`
	Amount                json.Number `json:"amount"`
	BillingInterval       string      `json:"billingInterval"`
	IntervalCount         int64       `json:"intervalCount"`
	CurrentPeriodStart    time.Time   `json:"currentPeriodStart"`
	CurrentPeriodEnd      time.Time   `json:"currentPeriodEnd"`
	CancelAtPeriodEnd     bool        `json:"cancelAtPeriodEnd"`
	TrialEnd              *time.Time  `json:"trialEnd"`
	PausedAt              *time.Time  `json:"pausedAt"`
	CanceledAt            *time.Time  `json:"canceledAt"`
	CancelReason          *string     `json:"cancelReason"`
	MerchantWalletAddress string      `json:"merchantWalletAddress"`
	LatestSessionID       *string     `json:"latestCheckoutSessionId"`
	BillingError          *string     `json:"billingError"`
	CreatedAt             time.Time   `json:"createdAt"`
}

// Every says how often it bills: "month", "3 months".
func (s dSubscription) Every() string {
	if s.IntervalCount <= 1 {
		return s.BillingInterval
	}
	return strconv.FormatInt(s.IntervalCount, 10) + " " + s.BillingInterval + "s"
}

// Can says whether an action applies to the subscription as it is (the
// workflow decides; the page offers only what can apply).
func (s dSubscription) Can(action string) bool {
	switch action {
	case "pause":
		return s.Status == "trialing" || s.Status == "active"
	case "resume":
		return s.Status == "paused"
	case "cancel":
		return s.Status != "canceled" && !s.CancelAtPeriodEnd
	case "cancel_now":
		return s.Status != "canceled"
	}
	return false
}

// InvoiceOpen: a renewal is due (renewal_pending, past_due).
func (s dSubscription) InvoiceOpen() bool {
	return s.Status == "renewal_pending" || s.Status == "past_due"
}

type dEndpoint struct {
	ID     string   `json:"id"`
	URL    string   `json:"url"`
	Events []string `json:"events"`
	Active bool     `json:"active"`
	Mode   string   `json:"mode"`
	Secret string   `json:"secret"`
	// PreviousSecretExpiresAt: a rotated secret still signs until then.
	PreviousSecretExpiresAt *time.Time `json:"previousSecretExpiresAt"`
	CreatedAt               time.Time  `json:"createdAt"`
}

type dAttempt struct {
	Attempt        int       `json:"attempt"`
	AttemptedAt    time.Time `json:"attemptedAt"`
	ResponseStatus *int      `json:"responseStatus"`
	Error          string    `json:"error"`
}

type dDelivery struct {
	ID             string     `json:"id"`
	EndpointID     string     `json:"endpointId"`
	Event          string     `json:"event"`
	Status         string     `json:"status"`
	Attempts       int        `json:"attempts"`
	ResponseStatus *int       `json:"responseStatus"`
	LastAttemptAt  *time.Time `json:"lastAttemptAt"`
	SessionID      *string    `json:"sessionId"`
	AttemptLog     []dAttempt `json:"attemptLog"`
	CreatedAt      time.Time  `json:"createdAt"`
	EndpointURL    string     `json:"endpointUrl"`
}

type dKey struct {
	KeyType    string     `json:"keyType"`
	KeyPrefix  string     `json:"keyPrefix"`
	KeySuffix  string     `json:"keySuffix"`
	FullKey    string     `json:"fullKey"`
	LastUsedAt *time.Time `json:"lastUsedAt"`
	CreatedAt  time.Time  `json:"createdAt"`
}

type dKYB struct {
	Status                string     `json:"status"`
	BusinessName          string     `json:"businessName"`
	BusinessType          string     `json:"businessType"`
	RegistrationNumber    string     `json:"registrationNumber"`
	Country               string     `json:"country"`
	Website               string     `json:"website"`
	ContactName           string     `json:"contactName"`
	ContactEmail          string     `json:"contactEmail"`
	ContactRole           string     `json:"contactRole"`
	ProductDescription    string     `json:"productDescription"`
	ExpectedMonthlyVolume string     `json:"expectedMonthlyVolume"`
	PrimaryUseCase        string     `json:"primaryUseCase"`
	ReviewNote            string     `json:"reviewNote"`
	SubmittedAt           time.Time  `json:"submittedAt"`
	ReviewedAt            *time.Time `json:"reviewedAt"`
}

type dSettlement struct {
	ID                string      `json:"id"`
	Amount            json.Number `json:"amount"`
	Token             string      `json:"token"`
	Network           string      `json:"network"`
	DestinationWallet string      `json:"destinationWallet"`
	TxHash            string      `json:"txHash"`
	Status            string      `json:"status"`
	CreatedAt         time.Time   `json:"createdAt"`
}

type dBalance struct {
	Network   string      `json:"network"`
	Token     string      `json:"token"`
	Collected json.Number `json:"collected"`
	Settled   json.Number `json:"settled"`
	// Refunded and RefundsPending are subtracted from Available.
	Refunded       json.Number `json:"refunded"`
	RefundsPending json.Number `json:"refundsPending"`
	Available      json.Number `json:"available"`
}

type dException struct {
	ID                    string      `json:"id"`
	Kind                  string      `json:"kind"`
	Status                string      `json:"status"`
	Network               string      `json:"network"`
	TxHash                string      `json:"txHash"`
	Amount                json.Number `json:"amount"`
	ExpectedAmount        json.Number `json:"expectedAmount"`
	PayerAddress          string      `json:"payerAddress"`
	MerchantWalletAddress string      `json:"merchantWalletAddress"`
	SessionIDs            []string    `json:"sessionIds"`
	TransactionID         *string     `json:"transactionId"`
	SubscriptionID        *string     `json:"subscriptionId"`
	Message               string      `json:"message"`
	Note                  string      `json:"note"`
	CreatedAt             time.Time   `json:"createdAt"`
}

func (r dPayment) listID() string      { return r.ID }
func (r dCustomer) listID() string     { return r.ID }
func (r dException) listID() string    { return r.ID }
func (r dLink) listID() string         { return r.ID }
func (r dSubscription) listID() string { return r.ID }
func (r dDelivery) listID() string     { return r.ID }
