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
	KYBStatus    string `gorm:"size:16;not null;default:none"`
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// DashboardSession is a signed-in dashboard user. Only the token's hash is kept.
type DashboardSession struct {
	ID         string `gorm:"primaryKey;size:36"`
	MerchantID string `gorm:"size:36;not null;index"`
	TokenHash  string `gorm:"size:64;not null;uniqueIndex"`
	ExpiresAt  time.Time
	RevokedAt  *time.Time
	CreatedAt  time.Time
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
	CreatedAt             time.Time
	UpdatedAt             time.Time
	DeletedAt             gorm.DeletedAt `gorm:"index"`
}

// Transaction is a completed payment: from a checkout or recorded by the merchant.
type Transaction struct {
	ID                    string       `gorm:"primaryKey;size:36"`
	MerchantID            string       `gorm:"size:36;not null;index:idx_tx_merchant_mode"`
	Mode                  Mode         `gorm:"size:8;not null;index:idx_tx_merchant_mode"`
	PaymentLinkID         *string      `gorm:"size:36;index"`
	SessionID             *string      `gorm:"size:36;uniqueIndex"`
	CustomerID            *string      `gorm:"size:36"`
	Amount                money.Amount `gorm:"not null"`
	Token                 string       `gorm:"size:16;not null"`
	Network               string       `gorm:"size:32;not null;uniqueIndex:idx_tx_network_hash"`
	TxHash                string       `gorm:"size:128;not null;uniqueIndex:idx_tx_network_hash"`
	Status                string       `gorm:"size:16;not null"`
	CustomerEmail         string       `gorm:"size:320"`
	CustomerName          string       `gorm:"size:200"`
	WalletAddress         string       `gorm:"size:128"`
	MerchantWalletAddress string       `gorm:"size:128"`
	Source                string       `gorm:"size:16;not null"` // checkout or api
	CreatedAt             time.Time
}

// TxHashClaim makes a transaction hash back one session or recorded
// transaction, ever: its primary key is (network, tx hash).
type TxHashClaim struct {
	Network       string  `gorm:"primaryKey;size:32"`
	TxHash        string  `gorm:"primaryKey;size:128"`
	SessionID     *string `gorm:"size:36"`
	TransactionID *string `gorm:"size:36"`
	CreatedAt     time.Time
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
	CreatedAt        time.Time
	UpdatedAt        time.Time
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

// Subscription is a recurring charge (created by the subscription workflow).
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
	CreatedAt             time.Time
	UpdatedAt             time.Time
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
	Network               string       `gorm:"size:32;not null"`
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
	Status                string       `gorm:"size:32;not null;index"`
	TxHash                *string      `gorm:"size:128"`
	FailureReason         string       `gorm:"size:64"`
	FailureMessage        string       `gorm:"size:500"`
	ReceivedAmount        money.Amount `gorm:"not null;default:0"`
	WorkflowStarted       bool         `gorm:"not null;default:false;index"`
	ExpiresAt             time.Time
	CompletedAt           *time.Time
	CreatedAt             time.Time
	UpdatedAt             time.Time
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
	MerchantID        string       `gorm:"size:36;not null;index"`
	Mode              Mode         `gorm:"size:8;not null"`
	Amount            money.Amount `gorm:"not null"`
	Token             string       `gorm:"size:16;not null"`
	Network           string       `gorm:"size:32;not null;uniqueIndex:idx_settlement_hash"`
	DestinationWallet string       `gorm:"size:128;not null"`
	TxHash            string       `gorm:"size:128;not null;uniqueIndex:idx_settlement_hash"`
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
	Secret     string     `gorm:"size:128;not null"`
	Active     bool       `gorm:"not null"`
	CreatedAt  time.Time
	UpdatedAt  time.Time
	DeletedAt  gorm.DeletedAt `gorm:"index"`
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
	ID             string   `gorm:"primaryKey;size:36"`
	MerchantID     string   `gorm:"size:36;not null;index:idx_delivery_merchant_mode"`
	Mode           Mode     `gorm:"size:8;not null;index:idx_delivery_merchant_mode"`
	EventID        string   `gorm:"size:36;not null;uniqueIndex:idx_delivery_event_endpoint"`
	EndpointID     string   `gorm:"size:36;not null;uniqueIndex:idx_delivery_event_endpoint"`
	Event          string   `gorm:"size:64;not null"`
	Payload        JSONText `gorm:"type:text;not null"`
	Status         string   `gorm:"size:16;not null"`
	Attempts       int      `gorm:"not null;default:0"`
	ResponseStatus *int
	LastAttemptAt  *time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
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
