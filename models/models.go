// Package models is the store: GORM models, versioned migrations and the
// repositories, which are the only code in the service that talks GORM.
// Models never reach JSON; the API maps them to response structs.
package models

import (
	"time"

	"github.com/paygate/paygate/money"
	"gorm.io/gorm"
)

// Mode separates test (testnets) from live (mainnets) data.
type Mode string

// The two modes.
const (
	ModeTest Mode = "test"
	ModeLive Mode = "live"
)

// Valid reports whether m is one of the two modes.
func (m Mode) Valid() bool { return m == ModeTest || m == ModeLive }

// KYB statuses of a merchant and of an application.
const (
	KYBNone     = "none"
	KYBPending  = "pending"
	KYBApproved = "approved"
	KYBRejected = "rejected"
)

// Merchant is a business that signed up on the dashboard.
type Merchant struct {
	ID           string `gorm:"primaryKey;size:36"`
	Email        string `gorm:"size:320;not null;uniqueIndex"`
	PasswordHash string `gorm:"size:255;not null"`
	BusinessName string `gorm:"size:200;not null"`
	WalletEVM    string `gorm:"column:wallet_evm;size:128"`
	WalletSolana string `gorm:"size:128"`
	LogoURL      string `gorm:"size:2048"`
	// PreviousEmail is the address a ConfirmEmail of a change replaced
	// (not stored).
	PreviousEmail string `gorm:"-" json:"-"`
	// ReplacedLogoURL is the logo an UpdateMerchant replaced (not stored).
	ReplacedLogoURL string `gorm:"-" json:"-"`
	// EmbedOrigins may frame the merchant's hosted pages (CSP
	// frame-ancestors); empty: none.
	EmbedOrigins StringList `gorm:"type:text"`
	KYBStatus    string     `gorm:"size:16;not null;default:none"`
	// RefundsEnabled is the refunds feature flag: nil is the default (on in
	// test mode, off in live mode until an operator enables it), true is on
	// in both modes, false off in both (see RefundsOn).
	RefundsEnabled *bool
	// EmailConfirmedAt is when the account's signed-in holder opened a link
	// e-mailed to Email (or set a password from a reset link sent there);
	// nil: the address is not proven, anyone may have typed it at sign-up.
	EmailConfirmedAt *time.Time
	CreatedAt        time.Time
	UpdatedAt        time.Time
}

// RefundsOn reports whether the merchant may create refunds in mode.
func (m *Merchant) RefundsOn(mode Mode) bool {
	if m.RefundsEnabled != nil {
		return *m.RefundsEnabled
	}
	return mode == ModeTest
}

// DashboardSession is a signed-in dashboard user. Only the token's hash is kept.
type DashboardSession struct {
	ID         string `gorm:"primaryKey;size:36"`
	MerchantID string `gorm:"size:36;not null;index"`
	TokenHash  string `gorm:"size:64;not null;uniqueIndex"`
	ExpiresAt  time.Time
	RevokedAt  *time.Time
	CreatedAt  time.Time
	// UserAgent and ClientIP are the browser and the address that signed
	// in (shown in the account's list of sessions; "" for older sessions).
	UserAgent string `gorm:"size:300;not null;default:''"`
	ClientIP  string `gorm:"size:64;not null;default:''"`
}

// PasswordReset is a password-reset link e-mailed to a merchant: only its
// token's hash is kept. It works once, within its hour, and only while it is
// the merchant's latest (asking again, or changing the password, ends it).
type PasswordReset struct {
	ID         string `gorm:"primaryKey;size:36"`
	MerchantID string `gorm:"size:36;not null;index:idx_password_resets_merchant_created,priority:1"`
	TokenHash  string `gorm:"size:64;not null;uniqueIndex"`
	ExpiresAt  time.Time
	UsedAt     *time.Time
	CreatedAt  time.Time `gorm:"index:idx_password_resets_merchant_created,priority:2"`
}

// EmailConfirmation is a link e-mailed to an account's address: opened by
// the account's signed-in holder, it proves they read mail sent there.
// Only the token's hash is kept; Email is the address it was sent to (an
// account whose address changed since is not confirmed by it).
type EmailConfirmation struct {
	ID         string `gorm:"primaryKey;size:36"`
	MerchantID string `gorm:"size:36;not null;index:idx_email_confirmations_merchant_created,priority:1"`
	Email      string `gorm:"size:320;not null"`
	TokenHash  string `gorm:"size:64;not null;uniqueIndex"`
	ExpiresAt  time.Time
	UsedAt     *time.Time
	CreatedAt  time.Time `gorm:"index:idx_email_confirmations_merchant_created,priority:2"`
}

// APIKey is a merchant's secret key. Only the hash is kept; at most one
// unrevoked key per type per merchant (a partial unique index).
type APIKey struct {
	ID         string `gorm:"primaryKey;size:36"`
	MerchantID string `gorm:"size:36;not null;index"`
	KeyType    Mode   `gorm:"size:8;not null"`
	KeyHash    string `gorm:"size:64;not null;uniqueIndex"`
	KeyPrefix  string `gorm:"size:32;not null"`
	KeySuffix  string `gorm:"size:8;not null"`
	LastUsedAt *time.Time
	RevokedAt  *time.Time
	CreatedAt  time.Time
}

// PaymentLink is a price and the networks it accepts.
type PaymentLink struct {
	ID                    string       `gorm:"primaryKey;size:36"`
	MerchantID            string       `gorm:"size:36;not null;index:idx_links_merchant_mode"`
	Mode                  Mode         `gorm:"size:8;not null;index:idx_links_merchant_mode"`
	Name                  string       `gorm:"size:200;not null"`
	Description           string       `gorm:"size:2000"`
	Amount                money.Amount `gorm:"not null"`
	Currency              string       `gorm:"size:8;not null"`
	Network               string       `gorm:"size:32;not null"`
	Networks              StringList   `gorm:"type:text;not null"`
	Token                 string       `gorm:"size:16;not null"`
	Active                bool         `gorm:"not null"`
	WalletAddresses       StringMap    `gorm:"type:text;not null"`
	MerchantWalletAddress string       `gorm:"size:128;not null"`
	TotalCollected        money.Amount `gorm:"not null;default:0"`
	TotalTransactions     int64        `gorm:"not null;default:0"`
	// TotalRefunded is what succeeded refunds of its transactions gave back:
	// TotalCollected stays the gross figure.
	TotalRefunded money.Amount `gorm:"not null;default:0"`
	// ProductID is the catalog product the link sells, if any.
	ProductID *string `gorm:"size:36;index"`
	// CheckoutID marks the single-use link behind a hosted checkout (POST
	// /api/v1/checkouts): it is not listed with the merchant's links.
	CheckoutID *string `gorm:"size:36;index"`
	// ExpiresAt, when set, ends the link's sale (a hosted checkout's expiry).
	ExpiresAt *time.Time
	// SubscriptionID marks the link that prices a subscription's renewals
	// (one per subscription): its sessions are the subscription's invoices.
	// Such a link is not the merchant's to list, change or delete, and takes
	// no sessions from the public pages (it is inactive).
	SubscriptionID *string `gorm:"size:36;uniqueIndex"`
	CreatedAt      time.Time
	UpdatedAt      time.Time
	DeletedAt      gorm.DeletedAt `gorm:"index"`
}

// Product is an item of a merchant's catalog that links and hosted
// checkouts sell.
type Product struct {
	ID          string       `gorm:"primaryKey;size:36"`
	MerchantID  string       `gorm:"size:36;not null;index:idx_products_merchant_mode"`
	Mode        Mode         `gorm:"size:8;not null;index:idx_products_merchant_mode"`
	Name        string       `gorm:"size:200;not null"`
	Description string       `gorm:"size:2000"`
	Price       money.Amount `gorm:"not null"`
	Currency    string       `gorm:"size:8;not null"`
	ImageURL    string       `gorm:"size:2048"`
	Active      bool         `gorm:"not null"`
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// Hosted checkout statuses.
const (
	HostedOpen      = "open"
	HostedComplete  = "complete"
	HostedExpired   = "expired"
	HostedCancelled = "cancelled"
)

// HostedCheckout is a one-off checkout an integration creates for one
// customer (POST /api/v1/checkouts): a product or an amount, metadata and
// the merchant's own customer id carried into checkout.completed, return
// URLs for the hosted page. It sells through a single-use payment link.
type HostedCheckout struct {
	ID                 string       `gorm:"primaryKey;size:36"`
	MerchantID         string       `gorm:"size:36;not null;index:idx_hosted_merchant_mode"`
	Mode               Mode         `gorm:"size:8;not null;index:idx_hosted_merchant_mode"`
	PaymentLinkID      string       `gorm:"size:36;not null;uniqueIndex"`
	ProductID          *string      `gorm:"size:36"`
	Name               string       `gorm:"size:200;not null"`
	Amount             money.Amount `gorm:"not null"`
	Currency           string       `gorm:"size:8;not null"`
	Metadata           StringMap    `gorm:"type:text;not null"`
	ExternalCustomerID string       `gorm:"size:255"`
	CustomerEmail      string       `gorm:"size:320"`
	SuccessURL         string       `gorm:"size:2048"`
	CancelURL          string       `gorm:"size:2048"`
	Status             string       `gorm:"size:16;not null"`
	SessionID          *string      `gorm:"size:36"`
	ExpiresAt          time.Time
	CreatedAt          time.Time
	UpdatedAt          time.Time
}

// Record verification states of a transaction (Transaction.Verification).
const (
	// VerificationPending: recorded by the merchant, not yet checked on chain.
	VerificationPending = "pending"
	// VerificationVerified: the chain shows the token reached the merchant's
	// wallet (every checkout transaction is verified before it exists).
	VerificationVerified = "verified"
	// VerificationFailed: the chain does not show the payment as recorded.
	VerificationFailed = "failed"
)

// Transaction is a completed payment: from a checkout or recorded by the
// merchant. Within a merchant a hash backs one transaction per network;
// across merchants a hash never blocks anyone.
type Transaction struct {
	ID            string       `gorm:"primaryKey;size:36"`
	MerchantID    string       `gorm:"size:36;not null;index:idx_tx_merchant_mode;uniqueIndex:idx_tx_merchant_network_hash,priority:1"`
	Mode          Mode         `gorm:"size:8;not null;index:idx_tx_merchant_mode"`
	PaymentLinkID *string      `gorm:"size:36;index"`
	SessionID     *string      `gorm:"size:36;uniqueIndex"`
	CustomerID    *string      `gorm:"size:36;index"`
	Amount        money.Amount `gorm:"not null"`
	Token         string       `gorm:"size:16;not null"`
	Network       string       `gorm:"size:32;not null;uniqueIndex:idx_tx_merchant_network_hash,priority:2"`
	TxHash        string       `gorm:"size:128;not null;uniqueIndex:idx_tx_merchant_network_hash,priority:3"`
	Status        string       `gorm:"size:16;not null"`
	// Verification says whether the chain confirms the payment (records
	// start pending; only verified ones count toward the settlement balance).
	Verification string `gorm:"size:16;not null;default:verified"`
	// VerificationMessage says why a record failed verification.
	VerificationMessage   string `gorm:"size:500"`
	CustomerEmail         string `gorm:"size:320"`
	CustomerName          string `gorm:"size:200"`
	WalletAddress         string `gorm:"size:128"`
	MerchantWalletAddress string `gorm:"size:128"`
	Source                string `gorm:"size:16;not null"` // checkout or api
	// RefundedAmount is what succeeded refunds returned to the payer.
	RefundedAmount money.Amount `gorm:"not null;default:0"`
	// RefundReserved is what pending, submitted and succeeded refunds hold,
	// and failed ones whose transfer is still watched (Refund.AmountHeld):
	// a refund reserves its amount when it is created (a conditional update
	// that never lets it pass Amount) and a failed one gives it back (at
	// the end of its watch).
	RefundReserved money.Amount `gorm:"not null;default:0"`
	CreatedAt      time.Time
}

// Payment exception kinds (PaymentException.Kind).
const (
	// ExceptionUnderpaid: a transfer for a session paid less than was due.
	ExceptionUnderpaid = "underpaid"
	// ExceptionWrongPayer: a transfer reached the merchant but did not come
	// from the session's wallet and carried no proof for it (an exchange
	// withdrawal, a router), or was older than the session.
	ExceptionWrongPayer = "wrong_payer"
	// ExceptionContested: two sessions without proof claimed one transfer;
	// none of them completes until the merchant decides.
	ExceptionContested = "contested"
	// ExceptionLate: a transfer bound to a session arrived after its end.
	ExceptionLate = "late"
	// ExceptionUnmatched: a transfer to a merchant wallet that no session
	// or record accounts for.
	ExceptionUnmatched = "unmatched"
	// ExceptionDuplicate: a session's payment of a hosted checkout (single
	// use) or of a subscription invoice that another of its sessions had
	// paid already: the customer paid twice, and the merchant refunds one.
	ExceptionDuplicate = "duplicate"
)

// Payment exception statuses.
const (
	ExceptionOpen      = "open"
	ExceptionResolved  = "resolved"
	ExceptionDismissed = "dismissed"
)

// PaymentException is money that reached a merchant wallet without paying
// a session: kept, shown and resolvable, never lost. One per merchant,
// network and hash.
type PaymentException struct {
	ID                    string       `gorm:"primaryKey;size:36"`
	MerchantID            string       `gorm:"size:36;not null;index:idx_exc_merchant_mode;uniqueIndex:idx_exc_merchant_hash,priority:1"`
	Mode                  Mode         `gorm:"size:8;not null;index:idx_exc_merchant_mode"`
	Network               string       `gorm:"size:32;not null;uniqueIndex:idx_exc_merchant_hash,priority:2"`
	TxHash                string       `gorm:"size:128;not null;uniqueIndex:idx_exc_merchant_hash,priority:3"`
	Kind                  string       `gorm:"size:16;not null"`
	Status                string       `gorm:"size:16;not null"`
	Amount                money.Amount `gorm:"not null"`
	ExpectedAmount        money.Amount `gorm:"not null;default:0"`
	PayerAddress          string       `gorm:"size:128"`
	MerchantWalletAddress string       `gorm:"size:128"`
	SessionIDs            StringList   `gorm:"type:text;not null"`
	TransactionID         *string      `gorm:"size:36"`
	// SubscriptionID is the subscription whose open invoice the exception
	// was resolved into (its transfer accepted as that renewal's payment),
	// and SubscriptionInvoice that invoice's number.
	SubscriptionID      *string `gorm:"size:36"`
	SubscriptionInvoice int     `gorm:"not null;default:0"`
	Message             string  `gorm:"size:500"`
	Note                string  `gorm:"size:500"`
	ResolvedAt          *time.Time
	CreatedAt           time.Time
	UpdatedAt           time.Time
}

// Customer is a payer known to a merchant in one mode; e-mail is unique per
// merchant and mode.
type Customer struct {
	ID               string       `gorm:"primaryKey;size:36"`
	MerchantID       string       `gorm:"size:36;not null;uniqueIndex:idx_customer_email"`
	Mode             Mode         `gorm:"size:8;not null;uniqueIndex:idx_customer_email"`
	Email            string       `gorm:"size:320;not null;uniqueIndex:idx_customer_email"`
	Name             string       `gorm:"size:200"`
	WalletAddress    string       `gorm:"size:128"`
	Country          string       `gorm:"size:2"`
	Metadata         StringMap    `gorm:"type:text;not null"`
	TotalSpent       money.Amount `gorm:"not null;default:0"`
	TransactionCount int64        `gorm:"not null;default:0"`
	// TotalRefunded is what succeeded refunds of the customer's
	// transactions gave back: TotalSpent stays the gross figure.
	TotalRefunded money.Amount `gorm:"not null;default:0"`
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// Subscription statuses.
const (
	SubTrialing       = "trialing"
	SubActive         = "active"
	SubPastDue        = "past_due"
	SubCanceled       = "canceled"
	SubPaused         = "paused"
	SubRenewalPending = "renewal_pending"
)

// Billing models of a subscription.
const (
	// BillingPush: the customer pays each period from their wallet through
	// an ordinary checkout session (the one built).
	BillingPush = "push"
)

// Subscription is a recurring charge. The API creates the row; from then on
// its SubscriptionWorkflow is the only writer (ChangeSeq orders its writes).
type Subscription struct {
	ID                    string `gorm:"primaryKey;size:36"`
	MerchantID            string `gorm:"size:36;not null;index:idx_sub_merchant_mode"`
	Mode                  Mode   `gorm:"size:8;not null;index:idx_sub_merchant_mode"`
	Status                string `gorm:"size:16;not null"`
	Network               string `gorm:"size:32;not null"`
	BillingModel          string `gorm:"size:32;not null"`
	CustomerWalletAddress string `gorm:"size:128"`
	CustomerEmail         string `gorm:"size:320"`
	CurrentPeriodStart    time.Time
	CurrentPeriodEnd      time.Time
	CancelAtPeriodEnd     bool         `gorm:"not null;default:false"`
	ProductName           string       `gorm:"size:200"`
	Amount                money.Amount `gorm:"not null"`
	BillingInterval       string       `gorm:"size:16;not null"`
	// IntervalCount is how many billing intervals one period lasts.
	IntervalCount int     `gorm:"not null;default:1"`
	CustomerID    *string `gorm:"size:36;index"`
	// MerchantWalletAddress receives the renewals.
	MerchantWalletAddress string `gorm:"size:128"`
	// TrialEnd is when the free trial ends (nil: no trial).
	TrialEnd *time.Time
	// BillingAnchor is the instant period ends are counted from
	// (billing.PeriodEnd); a resume moves it by the paused time.
	BillingAnchor *time.Time
	PausedAt      *time.Time
	CanceledAt    *time.Time
	// CancelReason: requested (cancel_now), cancel_at_period_end, unpaid.
	CancelReason string `gorm:"size:32"`
	// LatestSessionID is the checkout session of the latest invoice.
	LatestSessionID *string `gorm:"size:36"`
	// BillingError says why the subscription cannot be billed as it stands
	// (its network no longer configured, its receiving wallet proven by
	// another merchant, or proven by this one as a contract wallet on other
	// networks only): its workflow holds the next step and tries again
	// ("" when none).
	BillingError string `gorm:"size:500;not null;default:''"`
	// ChangeSeq is the workflow's number of the last change written: a
	// write carrying a number not above it is a retry and changes nothing.
	ChangeSeq int64 `gorm:"not null;default:0"`
	// WorkflowStarted is false until the subscription's workflow is known
	// to run; the repairer starts the workflow of rows left without one.
	WorkflowStarted bool `gorm:"not null;default:false;index"`
	CreatedAt       time.Time
	UpdatedAt       time.Time
}

// Refund statuses: pending (waiting for the merchant's transfer) →
// submitted (a hash is being verified) → succeeded | failed.
const (
	RefundPending   = "pending"
	RefundSubmitted = "submitted"
	RefundSucceeded = "succeeded"
	RefundFailed    = "failed"
)

// Who started a refund (SPEC.md payment.refunded initiatedBy).
const (
	InitiatedByMerchant = "merchant" // the dashboard
	InitiatedByAPI      = "api"      // an API key
	InitiatedByAdmin    = "admin"    // an operator
	InitiatedByCustomer = "customer" // the payer (no route yet)
)

// Refund returns (part of) a transaction to its payer. Refunds are
// non-custodial: the merchant's wallet that received the payment
// (SourceWallet) sends the USDC, and the refund's workflow verifies that
// transfer on chain. Within a merchant a hash backs one refund per network.
type Refund struct {
	ID             string       `gorm:"primaryKey;size:36"`
	MerchantID     string       `gorm:"size:36;not null;index:idx_refund_merchant_mode;uniqueIndex:idx_refund_merchant_network_hash,priority:1"`
	Mode           Mode         `gorm:"size:8;not null;index:idx_refund_merchant_mode"`
	TransactionID  string       `gorm:"size:36;not null;index"`
	Amount         money.Amount `gorm:"not null"`
	SubtotalAmount money.Amount `gorm:"not null"`
	TaxAmount      money.Amount `gorm:"not null"`
	// FeeReversed is the platform fee returned to the merchant: always 0,
	// the service charges no fee yet.
	FeeReversed       money.Amount `gorm:"not null;default:0"`
	Token             string       `gorm:"size:16;not null"`
	Network           string       `gorm:"size:32;not null;uniqueIndex:idx_refund_merchant_network_hash,priority:2"`
	DestinationWallet string       `gorm:"size:128;not null"`
	SourceWallet      string       `gorm:"size:128;not null"`
	Status            string       `gorm:"size:16;not null;index"`
	TxHash            *string      `gorm:"size:128;uniqueIndex:idx_refund_merchant_network_hash,priority:3"`
	Reason            string       `gorm:"size:500"`
	InitiatedBy       string       `gorm:"size:16;not null"`
	FailureReason     string       `gorm:"size:64"`
	FailureMessage    string       `gorm:"size:500"`
	// WatchedUntil is set on a failed refund while a transfer sent for it
	// is still watched (its own, not found in time; or one its failed
	// replacement replaced): landing by then, it makes the refund
	// succeeded. Cleared when the watch ends, or the refund is submitted
	// again or succeeds.
	WatchedUntil *time.Time
	// AmountHeld is set on a failed refund that keeps its amount reserved
	// on its transaction while a transfer sent for it is watched
	// (WatchedUntil): the transfer may still land, and a second refund of
	// that amount would then pay the customer twice. The watch's end gives
	// the amount back; a landing or a replacement takes it up again. A
	// refund failed before migration 20261128_0019 gave its amount back at
	// once, and holds nothing.
	AmountHeld bool `gorm:"not null;default:false"`
	// WorkflowStarted is false until the refund's workflow runs, so a crash
	// in between is found and repaired.
	WorkflowStarted bool `gorm:"not null;default:false;index"`
	// ExpiresAt ends the window in which the transfer must be submitted.
	ExpiresAt   time.Time
	SubmittedAt *time.Time
	SucceededAt *time.Time
	FailedAt    *time.Time
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// Checkout session statuses. The four terminal ones are stored as written here.
const (
	StatusCreated          = "payment_session_created"
	StatusWalletConnecting = "wallet_connecting"
	StatusWalletReady      = "wallet_ready"
	StatusBroadcast        = "txn_broadcast"
	StatusConfirming       = "txn_confirming"
	StatusComplete         = "complete"
	StatusFailed           = "failed"
	StatusCancelled        = "cancelled"
	StatusExpired          = "expired"
)

// CheckoutSession is one customer's attempt to pay a link.
type CheckoutSession struct {
	ID                    string       `gorm:"primaryKey;size:36"`
	MerchantID            string       `gorm:"size:36;not null;index"`
	Mode                  Mode         `gorm:"size:8;not null"`
	PaymentLinkID         string       `gorm:"size:36;not null;index"`
	WalletAddress         string       `gorm:"size:128"`
	WalletType            string       `gorm:"size:16"`
	Network               string       `gorm:"size:32;not null;index:idx_sessions_network_created,priority:1"`
	Subtotal              money.Amount `gorm:"not null"`
	Tax                   money.Amount `gorm:"not null"`
	ExpectedAmount        money.Amount `gorm:"not null"`
	CalculationID         string       `gorm:"size:64"`
	CustomerName          string       `gorm:"size:200"`
	CustomerEmail         string       `gorm:"size:320"`
	CustomerAddress       string       `gorm:"size:500"`
	CustomerCountry       string       `gorm:"size:2"`
	MerchantWalletAddress string       `gorm:"size:128;not null"`
	TokenAddress          string       `gorm:"size:128;not null"`
	// CheckoutID, ProductID, ExternalCustomerID and Metadata come from the
	// hosted checkout or product behind the link, for checkout.completed.
	CheckoutID         *string   `gorm:"size:36;index"`
	ProductID          *string   `gorm:"size:36"`
	ExternalCustomerID string    `gorm:"size:255"`
	Metadata           StringMap `gorm:"type:text"`
	// PaymentReference binds a payment to the session (unique): the nonce of
	// the EIP-3009 authorization (EVM, 0x + 64 hex) or the Solana Pay
	// reference key (base58). Nil on sessions created before it existed.
	PaymentReference *string `gorm:"size:88;uniqueIndex"`
	// SubscriptionID is set on the sessions that pay a subscription's
	// invoices: their outcome is signalled to the subscription's workflow.
	SubscriptionID *string `gorm:"size:36;index"`
	// InvoiceNumber is the number of the subscription invoice the session
	// pays (its workflow's count, from 1); the sessions opened for one
	// invoice (the first, after a cancel, each reminder's) share it, and
	// only one of them may complete. 0 on other sessions and on invoice
	// sessions opened before it was kept.
	InvoiceNumber   int          `gorm:"not null;default:0"`
	Status          string       `gorm:"size:32;not null;index"`
	TxHash          *string      `gorm:"size:128"`
	FailureReason   string       `gorm:"size:64"`
	FailureMessage  string       `gorm:"size:500"`
	ReceivedAmount  money.Amount `gorm:"not null;default:0"`
	WorkflowStarted bool         `gorm:"not null;default:false;index"`
	ExpiresAt       time.Time
	CompletedAt     *time.Time
	CreatedAt       time.Time
	UpdatedAt       time.Time
}

// CheckoutSessionEvent is one entry of a session's history.
type CheckoutSessionEvent struct {
	ID        string `gorm:"primaryKey;size:36"`
	SessionID string `gorm:"size:36;not null;index"`
	Status    string `gorm:"size:32;not null"`
	Source    string `gorm:"size:16;not null"`
	Chain     string `gorm:"size:32"`
	CreatedAt time.Time
}

// Settlement is a payout from the merchant's balance to an external wallet.
type Settlement struct {
	ID                string       `gorm:"primaryKey;size:36"`
	MerchantID        string       `gorm:"size:36;not null;index;uniqueIndex:idx_settlement_merchant_hash,priority:1"`
	Mode              Mode         `gorm:"size:8;not null"`
	Amount            money.Amount `gorm:"not null"`
	Token             string       `gorm:"size:16;not null"`
	Network           string       `gorm:"size:32;not null;uniqueIndex:idx_settlement_merchant_hash,priority:2"`
	DestinationWallet string       `gorm:"size:128;not null"`
	TxHash            string       `gorm:"size:128;not null;uniqueIndex:idx_settlement_merchant_hash,priority:3"`
	Status            string       `gorm:"size:16;not null"`
	CreatedAt         time.Time
}

// WebhookEndpoint is a merchant's receiver for events of one mode.
type WebhookEndpoint struct {
	ID         string     `gorm:"primaryKey;size:36"`
	MerchantID string     `gorm:"size:36;not null;index"`
	Mode       Mode       `gorm:"size:8;not null"`
	URL        string     `gorm:"size:2048;not null"`
	Events     StringList `gorm:"type:text;not null"`
	// Secret is the whsec_ signing secret in clear: set by the caller of
	// CreateWebhookEndpoint (and by the store on a rotation's answer), never
	// stored as is and not filled in by reads (Store.EndpointSecret opens it).
	Secret string `gorm:"-"`
	// SecretSealed is Secret encrypted at rest (keyring, AES-256-GCM under a
	// key derived from PAYGATE_SECRET_KEY, bound to the endpoint's id).
	SecretSealed string `gorm:"type:text"`
	// LegacySecret is the column that held the secret in clear before
	// migration 20261123_0005; always written empty since. A value found
	// there (a row written by an older binary during a rolling upgrade) is
	// sealed on first use.
	LegacySecret string `gorm:"column:secret;size:128;not null"`
	// PreviousSecretSealed is the secret a rotation replaced, sealed like
	// SecretSealed (under its own associated data), kept when the rotation
	// asked for an overlap: until PreviousSecretUntil every attempt carries
	// a signature under it beside the current one (Standard Webhooks'
	// several signatures), so receivers can switch secrets without a gap.
	PreviousSecretSealed string `gorm:"type:text"`
	PreviousSecretUntil  *time.Time
	Active               bool `gorm:"not null"`
	CreatedAt            time.Time
	UpdatedAt            time.Time
	DeletedAt            gorm.DeletedAt `gorm:"index"`
}

// PreviousSecretSigns says the secret a rotation replaced still signs at
// now (its overlap has not ended).
func (ep *WebhookEndpoint) PreviousSecretSigns(now time.Time) bool {
	return ep.PreviousSecretSealed != "" && ep.PreviousSecretUntil != nil && now.Before(*ep.PreviousSecretUntil)
}

// Event is one occurrence the service tells merchants about. Its Key makes
// emission idempotent (e.g. "checkout.completed:<sessionId>").
type Event struct {
	ID         string   `gorm:"primaryKey;size:36"`
	MerchantID string   `gorm:"size:36;not null;index"`
	Mode       Mode     `gorm:"size:8;not null"`
	Type       string   `gorm:"size:64;not null"`
	Key        string   `gorm:"size:200;not null;uniqueIndex"`
	Data       JSONText `gorm:"type:text;not null"`
	CreatedAt  time.Time
}

// Delivery statuses.
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed"
)

// WebhookDelivery is one event sent to one endpoint; Payload is the exact
// envelope that is signed and posted on every attempt.
type WebhookDelivery struct {
	ID         string `gorm:"primaryKey;size:36"`
	MerchantID string `gorm:"size:36;not null;index:idx_delivery_merchant_mode"`
	Mode       Mode   `gorm:"size:8;not null;index:idx_delivery_merchant_mode"`
	EventID    string `gorm:"size:36;not null;uniqueIndex:idx_delivery_event_endpoint"`
	EndpointID string `gorm:"size:36;not null;uniqueIndex:idx_delivery_event_endpoint"`
	// SessionID is the checkout session the event is about, if any (the
	// payment page lists the deliveries a payment caused).
	SessionID *string  `gorm:"size:36;index"`
	Event     string   `gorm:"size:64;not null"`
	Payload   JSONText `gorm:"type:text;not null"`
	Status    string   `gorm:"size:16;not null"`
	Attempts  int      `gorm:"not null;default:0"`
	// ScheduledAttempts is the highest retry-schedule slot attempted (extra
	// attempts asked by a retry are counted in Attempts only): a run that
	// resumes the delivery continues the schedule after it.
	ScheduledAttempts int `gorm:"not null;default:0"`
	ResponseStatus    *int
	LastAttemptAt     *time.Time
	CreatedAt         time.Time
	UpdatedAt         time.Time
}

// DeliveryAttempt is one POST of a delivery; (delivery, attempt) is unique so
// a retried activity cannot count an attempt twice.
type DeliveryAttempt struct {
	DeliveryID     string `gorm:"primaryKey;size:36"`
	Attempt        int    `gorm:"primaryKey"`
	ResponseStatus *int
	Error          string `gorm:"size:500"`
	AttemptedAt    time.Time
}

// KYBApplication is a merchant's business verification; one per merchant.
type KYBApplication struct {
	ID                    string `gorm:"primaryKey;size:36"`
	MerchantID            string `gorm:"size:36;not null;uniqueIndex"`
	Status                string `gorm:"size:16;not null"`
	BusinessName          string `gorm:"size:200;not null"`
	BusinessType          string `gorm:"size:100;not null"`
	RegistrationNumber    string `gorm:"size:100"`
	Country               string `gorm:"size:2;not null"`
	Website               string `gorm:"size:2048"`
	ContactName           string `gorm:"size:200;not null"`
	ContactEmail          string `gorm:"size:320;not null"`
	ContactRole           string `gorm:"size:100"`
	ProductDescription    string `gorm:"size:2000"`
	ExpectedMonthlyVolume string `gorm:"size:100"`
	PrimaryUseCase        string `gorm:"size:500"`
	ReviewNote            string `gorm:"size:2000"`
	SubmittedAt           time.Time
	ReviewedAt            *time.Time
	UpdatedAt             time.Time
}

// Notification is a message to a merchant (KYB decisions), kept whether or
// not it could be e-mailed.
type Notification struct {
	ID         string `gorm:"primaryKey;size:36"`
	MerchantID string `gorm:"size:36;not null;index"`
	Kind       string `gorm:"size:64;not null"`
	Subject    string `gorm:"size:200;not null"`
	Body       string `gorm:"size:4000;not null"`
	EmailedAt  *time.Time
	CreatedAt  time.Time
}

// ChainCursor is how far a worker's watcher has scanned a network's blocks
// for one kind of log (payments by reference, transfers to merchant
// wallets): a restarted worker resumes there instead of at the last few
// hundred blocks, so payments made while the workers were down are found.
type ChainCursor struct {
	Network   string `gorm:"primaryKey;size:32"`
	Kind      string `gorm:"primaryKey;size:32"`
	Block     uint64 `gorm:"not null"`
	UpdatedAt time.Time
}

// WalletPlace is where the payment watcher's read of a Solana wallet's
// USDC account stands (chain.SolanaPaymentScanner's place: the newest
// signature read, and where a listing longer than a pass stands): a
// restarted worker reads on from there instead of back to the late-payment
// window. Places are the same for every worker (they read one chain); two
// workers storing theirs at once leave either, and a place stored behind
// another costs a few transactions read twice, never one skipped.
type WalletPlace struct {
	Network   string `gorm:"primaryKey;size:32"`
	Wallet    string `gorm:"primaryKey;size:64"`
	Place     string `gorm:"type:text;not null"`
	UpdatedAt time.Time
}

// WalletProof records that a merchant proved it controls a wallet: the
// wallet's key signed chain.WalletProof.Message naming the wallet and the
// merchant. A wallet a merchant proved is that merchant's: no other
// merchant may name it for its payments, and where others named it before
// the proof, the watchers no longer give them its transfers (the prover's
// links that name it get them).
//
// A proof signed by the wallet's key holds on every network of its family.
// A smart contract wallet signs nothing a key can recover: it is proven by
// its own answer (EIP-1271) on one network, Network, and holds there only:
// the same address on another chain may be another party's contract.
type WalletProof struct {
	ID         string `gorm:"primaryKey;size:36"`
	MerchantID string `gorm:"size:36;not null;uniqueIndex:idx_wallet_proof_scope,priority:1"`
	Family     string `gorm:"size:16;not null"`
	// Address is canonical (chain.ParseAddress): EIP-55 on EVM.
	Address string `gorm:"size:128;not null;uniqueIndex:idx_wallet_proof_scope,priority:2;index"`
	// Network is where a contract wallet's proof was checked ("" for a
	// key's, which holds everywhere).
	Network   string    `gorm:"size:32;not null;default:'';uniqueIndex:idx_wallet_proof_scope,priority:3"`
	Message   string    `gorm:"type:text;not null"`
	Signature string    `gorm:"type:text;not null"`
	ProvedAt  time.Time `gorm:"not null"`
}

// RelayedTransaction is one nonce of the operator's relayer wallet on a
// network and what was sent with it (chain.RelayedTx): every replica of
// the API and the worker that share the wallet's key read it, so they take
// distinct nonces and the worker sends a transaction that stays unmined
// again at higher fees. Amounts of wei are decimal text.
type RelayedTransaction struct {
	Network     string     `gorm:"primaryKey;size:32;index:idx_relayed_payer,priority:1"`
	Relayer     string     `gorm:"primaryKey;size:42"`
	Nonce       uint64     `gorm:"primaryKey;autoIncrement:false"`
	Payer       string     `gorm:"size:42;not null;index:idx_relayed_payer,priority:2"`
	Reference   string     `gorm:"size:66;not null"`
	ValidBefore int64      `gorm:"not null"`
	ToAddress   string     `gorm:"size:42;not null"`
	Data        string     `gorm:"type:text;not null"`
	Gas         uint64     `gorm:"not null"`
	Tip         string     `gorm:"size:80;not null"`
	FeeCap      string     `gorm:"size:80;not null"`
	Hashes      StringList `gorm:"type:text;not null"`
	CancelFrom  int        `gorm:"not null;default:0"`
	Status      string     `gorm:"size:16;not null;index:idx_relayed_payer,priority:3"`
	MinedHash   string     `gorm:"size:66;not null;default:''"`
	SentAt      time.Time  `gorm:"not null"`
	CreatedAt   time.Time
	UpdatedAt   time.Time
}
