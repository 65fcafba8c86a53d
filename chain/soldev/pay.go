package soldev

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/programs/token"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/paygate/paygate/chain"
)

// ErrNotSolanaSession is returned by [PaySession] for a session on a
// network that is not Solana, so a caller can hand it to the EVM payer.
var ErrNotSolanaSession = errors.New("soldev: not a Solana session")

// PayOptions change how [PaySession] pays.
type PayOptions struct {
	// NoReference leaves the session's payment reference out of the
	// transfer, as a legacy wallet (or a cheater replaying someone else's
	// payment) would; the service can then find the payment only by the
	// submitted signature.
	NoReference bool
	// NoSubmit skips POST /api/checkout/submit: the service must find the
	// payment on chain by its reference.
	NoSubmit bool
}

// SessionPayment is what PaySession did.
type SessionPayment struct {
	SessionID string
	Network   string
	// Merchant is the merchant's wallet; MerchantTokenAccount its associated
	// token account of Mint, which received the tokens.
	Merchant             solana.PublicKey
	MerchantTokenAccount solana.PublicKey
	Mint                 solana.PublicKey
	Units                *big.Int
	// Reference is the session's reference key (base58) carried by the
	// transfer, or "" when none was (NoReference, or no paymentReference in
	// the session).
	Reference string
	// CreatedTokenAccount says the merchant's token account was created in
	// the payment transaction.
	CreatedTokenAccount bool
	// Signature is the transaction signature (base58), the session's txHash.
	Signature string
	// Submitted says the signature was posted to /api/checkout/submit.
	Submitted bool
}

// checkoutSession is the part of GET /api/checkout/session/{id} a wallet reads.
type checkoutSession struct {
	ID                    string `json:"id"`
	Network               string `json:"network"`
	MerchantWalletAddress string `json:"merchantWalletAddress"`
	TokenAddress          string `json:"tokenAddress"`
	AmountUnits           string `json:"amountUnits"`
	PaymentReference      string `json:"paymentReference"`
}

// PaySession pays a checkout session the Solana Pay way, as a customer's
// wallet would: it reads the session from the public status route of the API
// at apiBase, sends a transferChecked of the session's mint from the payer's
// associated token account to the merchant's (created idempotently in the
// same transaction when missing), with the session's paymentReference
// appended to the transfer instruction as a read-only non-signer key (the
// Solana Pay transfer-request rule), through the RPC at rpcURL; then it
// submits the signature. units overrides the amount (nil pays what is due).
// A session on a non-Solana network gives [ErrNotSolanaSession].
func PaySession(ctx context.Context, apiBase, rpcURL string, payer solana.PrivateKey, sessionID string, units *big.Int, opts PayOptions) (SessionPayment, error) {
	apiBase = strings.TrimSuffix(apiBase, "/")
	var poll struct {
		Data struct {
			Session checkoutSession `json:"session"`
		} `json:"data"`
	}
	if err := callJSON(ctx, http.MethodGet, apiBase+"/api/checkout/session/"+sessionID, nil, &poll); err != nil {
		return SessionPayment{}, err
	}
	s := poll.Data.Session
	if fam, ok := chain.FamilyOf(s.Network); !ok || fam != chain.FamilySolana {
		return SessionPayment{}, fmt.Errorf("%w: session %s is on %q", ErrNotSolanaSession, sessionID, s.Network)
	}
	if units == nil {
		v, ok := new(big.Int).SetString(s.AmountUnits, 10)
		if !ok {
			return SessionPayment{}, fmt.Errorf("soldev: session %s: amountUnits %q is not an integer", sessionID, s.AmountUnits)
		}
		units = v
	}
	if units.Sign() <= 0 || !units.IsUint64() {
		return SessionPayment{}, fmt.Errorf("soldev: amount %s out of range", units)
	}
	merchant, err := solana.PublicKeyFromBase58(s.MerchantWalletAddress)
	if err != nil {
		return SessionPayment{}, fmt.Errorf("soldev: session %s: merchantWalletAddress: %w", sessionID, err)
	}
	mint, err := solana.PublicKeyFromBase58(s.TokenAddress)
	if err != nil {
		return SessionPayment{}, fmt.Errorf("soldev: session %s: tokenAddress: %w", sessionID, err)
	}
	var refs []solana.PublicKey
	if s.PaymentReference != "" && !opts.NoReference {
		ref, err := solana.PublicKeyFromBase58(s.PaymentReference)
		if err != nil {
			return SessionPayment{}, fmt.Errorf("soldev: session %s: paymentReference: %w", sessionID, err)
		}
		refs = append(refs, ref)
	}

	client := rpc.New(rpcURL)
	t, err := newTransfer(ctx, client, payer.PublicKey(), mint, merchant, units.Uint64(), refs)
	if err != nil {
		return SessionPayment{}, err
	}
	sig, err := send(ctx, client, t.instructions(), []solana.PrivateKey{payer}, sendOptions{})
	if err != nil {
		return SessionPayment{}, fmt.Errorf("soldev: send: %w", err)
	}
	p := SessionPayment{SessionID: sessionID, Network: s.Network, Merchant: merchant, MerchantTokenAccount: t.destination,
		Mint: mint, Units: units, CreatedTokenAccount: t.createDestination, Signature: sig.String()}
	if len(refs) > 0 {
		p.Reference = refs[0].String()
	}
	if opts.NoSubmit {
		return p, nil
	}
	body, _ := json.Marshal(map[string]string{"sessionId": sessionID, "txHash": p.Signature})
	var out map[string]any
	if err := callJSON(ctx, http.MethodPost, apiBase+"/api/checkout/submit", body, &out); err != nil {
		return p, fmt.Errorf("soldev: submit %s: %w", p.Signature, err)
	}
	p.Submitted = true
	return p, nil
}

// transfer is an SPL transferChecked between associated token accounts.
type transfer struct {
	program           solana.PublicKey // the mint's token program
	payer             solana.PublicKey // owner of the source account
	feePayer          solana.PublicKey // pays the fee and a created account's rent (zero: payer)
	mint              solana.PublicKey
	decimals          uint8
	recipient         solana.PublicKey // wallet owning the destination account
	source            solana.PublicKey
	destination       solana.PublicKey
	units             uint64
	references        []solana.PublicKey
	createDestination bool
}

// newTransfer reads the mint (its token program and decimals) and whether
// the recipient's token account exists.
func newTransfer(ctx context.Context, client *rpc.Client, payer, mint, recipient solana.PublicKey, units uint64, refs []solana.PublicKey) (transfer, error) {
	acct, err := client.GetAccountInfoWithOpts(ctx, mint, &rpc.GetAccountInfoOpts{Encoding: solana.EncodingBase64, Commitment: rpc.CommitmentConfirmed})
	if err != nil {
		return transfer{}, fmt.Errorf("soldev: mint %s: %w", mint, err)
	}
	data := acct.Value.Data.GetBinary()
	if len(data) < 82 {
		return transfer{}, fmt.Errorf("soldev: %s is not a mint", mint)
	}
	t := transfer{program: acct.Value.Owner, payer: payer, mint: mint, decimals: data[44], recipient: recipient, units: units, references: refs}
	if t.source, err = associatedTokenAddress(payer, mint, t.program); err != nil {
		return transfer{}, err
	}
	if t.destination, err = associatedTokenAddress(recipient, mint, t.program); err != nil {
		return transfer{}, err
	}
	_, err = client.GetAccountInfoWithOpts(ctx, t.destination, &rpc.GetAccountInfoOpts{Encoding: solana.EncodingBase64, Commitment: rpc.CommitmentConfirmed})
	switch {
	case errors.Is(err, rpc.ErrNotFound):
		t.createDestination = true
	case err != nil:
		return transfer{}, fmt.Errorf("soldev: token account %s: %w", t.destination, err)
	}
	return t, nil
}

// instructions returns the optional idempotent creation of the destination
// account and the transferChecked carrying the references.
func (t transfer) instructions() []solana.Instruction {
	var ixs []solana.Instruction
	if t.createDestination {
		feePayer := t.feePayer
		if feePayer.IsZero() {
			feePayer = t.payer
		}
		ixs = append(ixs, createATAIdempotent(feePayer, t.recipient, t.mint, t.program))
	}
	return append(ixs, transferChecked(t.program, t.source, t.mint, t.destination, t.payer, t.units, t.decimals, t.references...))
}

// transferChecked builds the token program's TransferChecked; references are
// appended as read-only non-signer keys, which the token program ignores and
// getSignaturesForAddress indexes.
func transferChecked(program, source, mint, destination, owner solana.PublicKey, units uint64, decimals uint8, references ...solana.PublicKey) solana.Instruction {
	ix := token.NewTransferCheckedInstruction(units, decimals, source, mint, destination, owner, nil).Build()
	data, err := ix.Data()
	if err != nil {
		panic(err) // encoding two integers cannot fail
	}
	accounts := ix.Accounts()
	for _, r := range references {
		accounts = append(accounts, solana.Meta(r))
	}
	return solana.NewInstruction(program, accounts, data)
}

// createATAIdempotent builds the Associated Token Account program's
// CreateIdempotent (instruction 1), which succeeds when the account exists.
func createATAIdempotent(payer, wallet, mint, program solana.PublicKey) solana.Instruction {
	ata, err := associatedTokenAddress(wallet, mint, program)
	if err != nil {
		panic(err)
	}
	return solana.NewInstruction(solana.SPLAssociatedTokenAccountProgramID, solana.AccountMetaSlice{
		solana.Meta(payer).WRITE().SIGNER(),
		solana.Meta(ata).WRITE(),
		solana.Meta(wallet),
		solana.Meta(mint),
		solana.Meta(solana.SystemProgramID),
		solana.Meta(program),
	}, []byte{1})
}

// associatedTokenAddress derives the associated token account of wallet for
// mint under a token program (SPL Token or Token-2022).
func associatedTokenAddress(wallet, mint, program solana.PublicKey) (solana.PublicKey, error) {
	addr, _, err := solana.FindProgramAddress([][]byte{wallet[:], program[:], mint[:]}, solana.SPLAssociatedTokenAccountProgramID)
	return addr, err
}

// sendOptions change how send submits a transaction.
type sendOptions struct {
	skipPreflight bool
	// addressTables makes a v0 transaction that loads these tables.
	addressTables map[solana.PublicKey]solana.PublicKeySlice
	// base58 sends the transaction base58-encoded (the RPC's default
	// encoding) instead of base64.
	base58 bool
}

// send signs instructions with signers (the first pays the fee) on a recent
// blockhash and sends them.
func send(ctx context.Context, client *rpc.Client, ixs []solana.Instruction, signers []solana.PrivateKey, o sendOptions) (solana.Signature, error) {
	bh, err := client.GetLatestBlockhash(ctx, rpc.CommitmentConfirmed)
	if err != nil {
		return solana.Signature{}, fmt.Errorf("getLatestBlockhash: %w", err)
	}
	txOpts := []solana.TransactionOption{solana.TransactionPayer(signers[0].PublicKey())}
	if o.addressTables != nil {
		txOpts = append(txOpts, solana.TransactionAddressTables(o.addressTables))
	}
	tx, err := solana.NewTransaction(ixs, bh.Value.Blockhash, txOpts...)
	if err != nil {
		return solana.Signature{}, err
	}
	if _, err := tx.Sign(func(k solana.PublicKey) *solana.PrivateKey {
		for i := range signers {
			if signers[i].PublicKey() == k {
				return &signers[i]
			}
		}
		return nil
	}); err != nil {
		return solana.Signature{}, fmt.Errorf("sign: %w", err)
	}
	if o.base58 {
		raw, err := tx.MarshalBinary()
		if err != nil {
			return solana.Signature{}, err
		}
		var sig solana.Signature
		err = client.RPCCallForInto(ctx, &sig, "sendTransaction", []any{solana.Base58(raw).String(), map[string]any{"encoding": "base58", "skipPreflight": o.skipPreflight}})
		return sig, err
	}
	return client.SendTransactionWithOpts(ctx, tx, rpc.TransactionOpts{SkipPreflight: o.skipPreflight, PreflightCommitment: rpc.CommitmentConfirmed})
}

var apiClient = &http.Client{Timeout: 30 * time.Second}

func callJSON(ctx context.Context, method, url string, body []byte, out any) error {
	return callJSONAuth(ctx, method, url, "", body, out)
}

// callJSONAuth sends a request, with a bearer credential unless token is
// "", and decodes the answer.
func callJSONAuth(ctx context.Context, method, url, token string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := apiClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if res.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %d %s", method, url, res.StatusCode, raw)
	}
	return json.Unmarshal(raw, out)
}
