package chain

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"time"

	"github.com/gagliardetto/solana-go"
)

// Verdict is the outcome of one verification of a submitted transaction.
type Verdict string

const (
	// VerdictPending: not seen yet, not enough confirmations, or the block
	// holding the transaction was reorganised away. Check again later.
	VerdictPending Verdict = "pending"
	// VerdictComplete: the merchant received at least the expected amount in a
	// confirmed, successful transaction.
	VerdictComplete Verdict = "complete"
	// VerdictFailed: the confirmed transaction reverted or did not pay the
	// merchant enough USDC; see VerifyResult.Reason.
	VerdictFailed Verdict = "failed"
)

// Failure reasons of a failed verdict (the machine codes of checkout.failed).
const (
	// ReasonInvalidTransfer: no USDC transfer to the merchant, or less than expected.
	ReasonInvalidTransfer = "INVALID_TRANSFER"
	// ReasonTxReverted: the transaction failed on chain (EVM status 0, Solana meta.err).
	ReasonTxReverted = "TX_REVERTED"
	// ReasonTxNotFound: the hash stayed unseen past the caller's window
	// (DESIGN.md: default 1 hour). Verifiers never return it, since only the
	// caller knows how long it has waited; it is here so that every failure
	// code lives in one place.
	ReasonTxNotFound = "TX_NOT_FOUND"
)

// VerifyRequest asks whether a transaction paid a merchant.
type VerifyRequest struct {
	// Network is the API network name, e.g. "base_sepolia".
	Network string
	// TxHash is the EVM transaction hash or the Solana signature.
	TxHash string
	// MerchantAddress is the receiving wallet (for Solana, the wallet that owns
	// the token account, not the token account itself).
	MerchantAddress string
	// ExpectedUnits is the amount due in integer token units (USDC has 6
	// decimals: "32610000" is 32.61 USDC), as a decimal string.
	ExpectedUnits string
	// PayerAddress, when set, is the wallet the payment must come from (the
	// checkout session's wallet). A transfer from anyone else fails, so a
	// stranger cannot claim another customer's transfer for their session.
	PayerAddress string
	// NotBefore, when set, is the earliest block time accepted (the session's
	// creation, less some clock slack): an older transfer to the merchant
	// cannot pay a new session.
	NotBefore time.Time
	// Reference, when set, is the session's payment reference: on EVM the
	// 32-byte nonce (0x + 64 hex) of the EIP-3009 authorization the payer
	// signs; on Solana the Solana Pay reference key (base58) the transfer
	// carries as an account. A transfer that carries it is bound to the
	// session by the payer's own signature, and the PayerAddress and
	// NotBefore checks do not apply to it.
	Reference string
	// Alone judges the transaction by itself: an unseen one, or one that
	// paid nothing, is not followed to another transaction carrying the
	// Reference (PaidBy stays empty). A watcher keeping a transfer it found
	// asks about that transfer, not about the session's payment.
	Alone bool `json:",omitempty"`
}

// VerifyResult is what the chain says about a transaction.
type VerifyResult struct {
	// Seen is true once the transaction is in a block (EVM) or confirmed (Solana).
	Seen bool
	// BlockNumber is the block (EVM) or slot (Solana) holding the transaction.
	BlockNumber uint64
	// BlockHash is the hash of the EVM block holding the transaction; empty on Solana.
	BlockHash string
	// Confirmations counts the blocks from the transaction's block to the head, inclusive.
	Confirmations uint64
	// Required is the number of confirmations a final verdict needs.
	Required uint64
	// ReceivedUnits is the net amount of USDC the merchant received in the
	// transaction, in integer token units (decimal string). Set once seen.
	ReceivedUnits string
	// Payer is the wallet the USDC came from, when known.
	Payer string
	// BlockTime is the time of the block holding the transaction, when
	// known (set once a verdict is possible).
	BlockTime time.Time
	// Verdict is pending, complete or failed.
	Verdict Verdict
	// Reason is the machine code of a failed verdict ([ReasonInvalidTransfer],
	// [ReasonTxReverted]); empty otherwise.
	Reason string
	// Message explains the verdict to a human.
	Message string
	// Bound is true when the transfer carries the request's Reference (an
	// EIP-3009 authorization whose nonce is the reference, or the Solana Pay
	// reference key): only the payer could have produced it for this session.
	// ReceivedUnits then counts only the bound transfer.
	Bound bool
	// Refs lists the references the transaction carries besides the
	// request's own: EVM, the nonces of the canonical token's
	// AuthorizationUsed logs; Solana, the read-only non-signer account keys
	// (Solana Pay references are among them). The caller checks them against
	// other sessions' references: a transfer bound to another session never
	// pays this one.
	Refs []string
	// PaidBy is set (EVM) when the submitted transaction reverted because
	// another transaction had used the session's authorization first (the
	// payer's EIP-3009 authorization, its nonce the request's Reference,
	// relayed by anyone who copied it from the mempool), or was never mined
	// because another took its place (a wallet's speed-up, a relayer's fee
	// bump) and carried the authorization; (Solana) when the submitted
	// transaction is unseen and another finalized one carrying the
	// session's reference, from the declared wallet or paying in full, is
	// on chain (the payer paid again after its blockhash expired): that
	// transaction's hash. The rest of the result is then that transaction's verdict: the
	// payer's signed payment happened, in it.
	PaidBy string
	// Foreign is set on a failed verdict when the transaction is provably
	// not a payment the session's customer made for it: it moved no USDC
	// to the merchant (whoever sent it); or it paid too little and its
	// USDC neither came from nor was sent (Solana: signed as fee payer) by
	// the wallet the request declares; or it paid enough from another
	// wallet and the declared one did not send it (BindToSession); or it
	// was mined before the session. Anyone who knows a
	// session's id can submit such a transaction, so it must not end the
	// session: the caller releases the hash and the session waits for its
	// payment. Never set without a declared PayerAddress, nor on a verdict
	// followed to another transaction (PaidBy).
	Foreign bool
	// SentByDeclared is set on a verdict that would complete with USDC
	// from another wallet than the declared one, when the declared wallet
	// sent the transaction (EVM: its from; Solana: its fee payer), as
	// through a router: BindToSession's failure is then the customer's
	// own, not Foreign.
	SentByDeclared bool `json:",omitempty"`
}

// PaysInFull reports whether the transaction is on chain and, as far as
// can be told before its final verdict, the payment of a session that
// declares payer and is due expectedUnits: not failed, not followed to
// another transaction, at least the amount due reached the merchant, and
// it came from payer or is bound to the session by its reference, and it
// carries no other session's reference unless bound to this one. The
// final verdict still decides (confirmations, the block's time, a revert
// seen only then); this is what lets it take the place of a hash the
// chain has not shown.
func (r VerifyResult) PaysInFull(payer string, expectedUnits int64) bool {
	if !r.Seen || r.Verdict == VerdictFailed || r.PaidBy != "" || payer == "" || expectedUnits <= 0 {
		return false
	}
	got, ok := new(big.Int).SetString(r.ReceivedUnits, 10)
	if !ok || got.Cmp(big.NewInt(expectedUnits)) < 0 {
		return false
	}
	return r.Bound || (len(r.Refs) == 0 && SameAddress(r.Payer, payer))
}

// Verifier checks a submitted transaction against the chain.
//
// A returned error is never a verdict. Errors wrapping [ErrInvalidRequest],
// [ErrUnknownNetwork] or [ErrChainIDMismatch] are permanent (see
// [IsPermanent]); any other error is a transient fault (RPC unreachable,
// timeout, malformed answer) and the caller should retry.
type Verifier interface {
	Verify(ctx context.Context, req VerifyRequest) (VerifyResult, error)
}

var (
	// ErrInvalidRequest marks a request that can never be verified as given
	// (malformed hash, address or amount). Retrying does not help.
	ErrInvalidRequest = errors.New("chain: invalid verify request")
	// ErrUnknownNetwork marks a network that is not in the registry, or that a
	// verifier does not handle.
	ErrUnknownNetwork = errors.New("chain: unknown network")
	// ErrChainIDMismatch marks an RPC endpoint that serves another chain than
	// the network's configured chain id. It is a configuration fault: no
	// verdict is given until the RPC URL or chain id is fixed.
	ErrChainIDMismatch = errors.New("chain: rpc endpoint serves another chain")
)

// IsPermanent reports whether a Verify error cannot be cured by retrying.
func IsPermanent(err error) bool {
	return errors.Is(err, ErrInvalidRequest) || errors.Is(err, ErrUnknownNetwork) || errors.Is(err, ErrChainIDMismatch)
}

// parseExpected parses ExpectedUnits: a positive integer in decimal.
func parseExpected(s string) (*big.Int, error) {
	v, ok := new(big.Int).SetString(s, 10)
	if !ok || v.Sign() <= 0 || len(s) > 78 { // 78 digits hold any uint256
		return nil, fmt.Errorf("%w: expectedUnits must be a positive integer, got %q", ErrInvalidRequest, s)
	}
	return v, nil
}

// EVMDialer connects to the RPC endpoint of an EVM network.
type EVMDialer func(ctx context.Context, n Network) (EVMClient, error)

// SolanaDialer connects to the RPC endpoint of a Solana network.
type SolanaDialer func(ctx context.Context, n Network) (SolanaClient, error)

// Option configures a [MultiVerifier].
type Option func(*MultiVerifier)

// WithEVMDialer replaces the default EVM dialer (ethclient.DialContext on the
// network's RPC URL); tests use it to plug in a simulated backend.
func WithEVMDialer(d EVMDialer) Option { return func(m *MultiVerifier) { m.dialEVM = d } }

// WithSolanaDialer replaces the default Solana dialer (rpc.New on the
// network's RPC URL).
func WithSolanaDialer(d SolanaDialer) Option { return func(m *MultiVerifier) { m.dialSolana = d } }

// MultiVerifier dispatches each request to the verifier of its network. It
// dials each network lazily on first use and, for EVM networks, checks the
// endpoint's chain id before trusting it. When the registry entry of a
// network changes (e.g. the dev profile points it elsewhere) the next request
// redials. It is safe for concurrent use.
type MultiVerifier struct {
	reg        *Registry
	dialEVM    EVMDialer
	dialSolana SolanaDialer

	mu        sync.Mutex
	verifiers map[string]cachedVerifier
}

type cachedVerifier struct {
	net Network
	v   Verifier
	cl  any // client, closed on redial if it has Close()
}

// NewMultiVerifier returns a verifier for every network of reg.
func NewMultiVerifier(reg *Registry, opts ...Option) *MultiVerifier {
	m := &MultiVerifier{
		reg:        reg,
		dialEVM:    DialEVM,
		dialSolana: DialSolana,
		verifiers:  make(map[string]cachedVerifier),
	}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Verify implements [Verifier].
func (m *MultiVerifier) Verify(ctx context.Context, req VerifyRequest) (VerifyResult, error) {
	rpcURL := ""
	if n, ok := m.reg.Lookup(req.Network); ok {
		rpcURL = n.RPCURL
	}
	v, err := m.verifier(ctx, req.Network)
	if err != nil {
		return VerifyResult{}, scrubRPC(err, rpcURL)
	}
	res, err := v.Verify(ctx, req)
	if err != nil {
		return res, scrubRPC(err, rpcURL)
	}
	return BindToSession(req, res), nil
}

// scrubRPC hides the RPC URL in an error's text (provider URLs often carry
// an API key, and Go's HTTP errors print the whole URL): errors end up in
// logs and in the Temporal history shown in the Web UI. errors.Is and
// errors.As still see the original error.
// ScrubRPC replaces rpcURL in err's text by its redacted form (provider
// URLs often carry an API key), for errors that reach a log.
func ScrubRPC(err error, rpcURL string) error { return scrubRPC(err, rpcURL) }

func scrubRPC(err error, rpcURL string) error {
	if err == nil || rpcURL == "" || !strings.Contains(err.Error(), rpcURL) {
		return err
	}
	return &scrubbedError{msg: strings.ReplaceAll(err.Error(), rpcURL, redactURL(rpcURL)), err: err}
}

type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// BindToSession turns a verdict that would complete into a failure when the
// transfer is not the session's own: it came from another wallet than
// req.PayerAddress, or it is older than req.NotBefore. Pending results are
// left alone (the checks apply to the final verdict), and so is a transfer
// bound to the session by its reference (res.Bound): the payer's signature
// over the session's reference proves more than a declared wallet. Such a
// failure is Foreign: the transfer is not the session's payment.
func BindToSession(req VerifyRequest, res VerifyResult) VerifyResult {
	if res.Verdict == VerdictFailed && res.PaidBy == "" && req.PayerAddress != "" && !req.NotBefore.IsZero() &&
		!res.BlockTime.IsZero() && res.BlockTime.Before(req.NotBefore) {
		// A failure mined before the session (an old transaction of the
		// declared wallet, whose address is public) is not its payment.
		res.Foreign = true
	}
	if res.Verdict != VerdictComplete || res.Bound {
		return res
	}
	if req.PayerAddress != "" && !SameAddress(req.PayerAddress, res.Payer) {
		payer := res.Payer
		if payer == "" {
			payer = "an unknown wallet"
		}
		res.Verdict, res.Reason = VerdictFailed, ReasonInvalidTransfer
		res.Message = fmt.Sprintf("the transfer came from %s, not from the session's wallet %s", payer, req.PayerAddress)
		// Another wallet's transfer (known) that the declared wallet did
		// not send: not this session's payment. One whose payer is
		// unknown, or that the declared wallet sent (through a router),
		// may be the customer's: its failure stands.
		res.Foreign = res.Payer != "" && !res.SentByDeclared
		return res
	}
	if !req.NotBefore.IsZero() && !res.BlockTime.IsZero() && res.BlockTime.Before(req.NotBefore) {
		res.Verdict, res.Reason = VerdictFailed, ReasonInvalidTransfer
		res.Message = fmt.Sprintf("the transaction was mined at %s, before the checkout session was created",
			res.BlockTime.UTC().Format(time.RFC3339))
		res.Foreign = req.PayerAddress != ""
	}
	return res
}

// SameAddress compares addresses; EVM hex addresses without regard to case.
func SameAddress(a, b string) bool {
	if strings.HasPrefix(a, "0x") || strings.HasPrefix(a, "0X") {
		return strings.EqualFold(a, b)
	}
	return a == b
}

func (m *MultiVerifier) verifier(ctx context.Context, name string) (Verifier, error) {
	n, ok := m.reg.Lookup(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownNetwork, name)
	}
	m.mu.Lock()
	if c, ok := m.verifiers[name]; ok && c.net == n {
		m.mu.Unlock()
		return c.v, nil
	}
	m.mu.Unlock()

	// Dial outside the lock: reading the chain id is a network round trip and
	// must not hold up verifications on other networks.
	v, cl, err := m.dial(ctx, n)
	if err != nil {
		return nil, err
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.verifiers[name]; ok {
		if c.net == n { // another request dialled first: keep theirs
			closeClient(cl)
			return c.v, nil
		}
		closeClient(c.cl) // the registry entry changed: replace
	}
	m.verifiers[name] = cachedVerifier{net: n, v: v, cl: cl}
	return v, nil
}

func (m *MultiVerifier) dial(ctx context.Context, n Network) (Verifier, any, error) {
	switch n.Family {
	case FamilyEVM:
		c, err := m.dialEVM(ctx, n)
		if err != nil {
			return nil, nil, fmt.Errorf("chain: dial %s: %w", n.Name, err)
		}
		v, err := NewEVMVerifier(ctx, n, c)
		if err != nil {
			closeClient(c)
			return nil, nil, err
		}
		return v, c, nil
	case FamilySolana:
		c, err := m.dialSolana(ctx, n)
		if err != nil {
			return nil, nil, fmt.Errorf("chain: dial %s: %w", n.Name, err)
		}
		if err := checkGenesis(ctx, n, c); err != nil {
			closeClient(c)
			return nil, nil, err
		}
		v, err := NewSolanaVerifier(n, c)
		if err != nil {
			closeClient(c)
			return nil, nil, err
		}
		return v, c, nil
	default:
		return nil, nil, fmt.Errorf("%w: %q has unsupported family %q", ErrUnknownNetwork, n.Name, n.Family)
	}
}

// Close closes every client the verifier dialled.
func (m *MultiVerifier) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, c := range m.verifiers {
		closeClient(c.cl)
		delete(m.verifiers, name)
	}
}

func closeClient(c any) {
	switch c := c.(type) {
	case interface{ Close() }:
		c.Close()
	case interface{ Close() error }:
		_ = c.Close()
	}
}

// nonNegative renders a net amount for VerifyResult.ReceivedUnits: a merchant
// whose balance fell in the transaction received nothing.
func nonNegative(v *big.Int) string {
	if v.Sign() < 0 {
		return "0"
	}
	return v.String()
}

// checkGenesis refuses a Solana RPC endpoint of another cluster than the
// network's (its genesis hash differs), as an EVM chain id is checked.
func checkGenesis(ctx context.Context, n Network, c SolanaClient) error {
	if n.GenesisHash == "" {
		return nil
	}
	g, ok := c.(interface {
		GetGenesisHash(ctx context.Context) (solana.Hash, error)
	})
	if !ok {
		return nil
	}
	h, err := g.GetGenesisHash(ctx)
	if err != nil {
		return fmt.Errorf("chain: %s: read genesis hash: %w", n.Name, err)
	}
	if h.String() != n.GenesisHash {
		return fmt.Errorf("%w: %s expects genesis %s, %s serves %s", ErrChainIDMismatch, n.Name, n.GenesisHash, redactURL(n.RPCURL), h)
	}
	return nil
}
