package browser

import (
	"context"
	"crypto/ecdsa"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"sync"

	ethereum "github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/ethereum/go-ethereum/signer/core/apitypes"
	"github.com/google/uuid"
)

// EIP-1193 (and MetaMask's) provider error codes the test wallet answers with.
const (
	// CodeUserRejected is EIP-1193's 4001: the user rejected the request.
	CodeUserRejected = 4001
	// CodeUnauthorized is EIP-1193's 4100: the page has not been given the
	// account (eth_requestAccounts first), or asked for another one.
	CodeUnauthorized = 4100
	// CodeUnsupportedMethod is EIP-1193's 4200.
	CodeUnsupportedMethod = 4200
	// CodeChainDisconnected is EIP-1193's 4901: the wallet cannot reach the
	// active chain's RPC endpoint.
	CodeChainDisconnected = 4901
	// CodeUnrecognizedChain is 4902 (MetaMask's, which pages rely on): the
	// chain passed to wallet_switchEthereumChain is unknown to the wallet,
	// the page should offer it with wallet_addEthereumChain.
	CodeUnrecognizedChain = 4902
	// CodeInvalidParams is JSON-RPC's -32602.
	CodeInvalidParams = -32602
	// CodeInternal is JSON-RPC's -32603.
	CodeInternal = -32603
)

// Identity of the test wallet in its EIP-6963 announcement.
const (
	WalletName = "paygate test wallet"
	WalletRDNS = "dev.paygate.testwallet"
)

// walletIconSVG is the announced icon: a square, as EIP-6963 asks.
const walletIconSVG = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 96 96"><rect width="96" height="96" rx="20" fill="#1f6feb"/><path d="M22 34h52v36H22z" fill="#fff"/><path d="M22 34l40-12v12" fill="#c9d8ff"/><circle cx="62" cy="52" r="6" fill="#1f6feb"/></svg>`

// WalletIcon is the data: URI of the announced icon.
var WalletIcon = "data:image/svg+xml;base64," + base64.StdEncoding.EncodeToString([]byte(walletIconSVG))

// Names the wallet uses in the page.
const (
	walletBinding = "__paygateWallet"       // page → Go: one JSON request
	walletSettle  = "__paygateWalletSettle" // Go → page: (id, result, error)
	walletEmit    = "__paygateWalletEmit"   // Go → page: (event, data)
)

//go:embed wallet.js
var walletJS string

// ApprovalMethods are the requests a user approves or rejects in a real
// wallet; [Wallet.Reject] makes the test wallet answer them with 4001.
var ApprovalMethods = []string{
	"eth_requestAccounts",
	"wallet_switchEthereumChain",
	"wallet_addEthereumChain",
	"eth_signTypedData_v4",
	"personal_sign",
	"eth_sendTransaction",
}

// ReadMethods are passed through to the active chain's RPC endpoint as they
// are.
var ReadMethods = []string{
	"eth_call",
	"eth_getTransactionReceipt",
	"eth_getTransactionByHash",
	"eth_blockNumber",
	"eth_estimateGas",
	"eth_getBalance",
	"eth_getTransactionCount",
	"eth_getCode",
	"eth_getBlockByNumber",
	"eth_gasPrice",
	"eth_maxPriorityFeePerGas",
	"eth_feeHistory",
}

// WalletConfig configures a [Wallet].
type WalletConfig struct {
	// Key is the wallet's one account (required).
	Key *ecdsa.PrivateKey
	// RPC maps each chain the wallet knows to its JSON-RPC endpoint (for a
	// dev chain, its RPCURL()). A chain that is not here is unknown to the
	// wallet until the page adds it (wallet_addEthereumChain).
	RPC map[uint64]string
	// ChainID is the chain the wallet starts on; it must be in RPC. Zero takes
	// the smallest chain id of RPC.
	ChainID uint64
	// AddChainRPC, when it has the chain a page adds with
	// wallet_addEthereumChain, is the endpoint the wallet uses for it instead
	// of the page's rpcUrls[0] (a test reaches no public endpoint).
	AddChainRPC map[uint64]string
	// NoWindowEthereum leaves window.ethereum unset: the page finds the
	// wallet only through EIP-6963.
	NoWindowEthereum bool
	// Connected starts the wallet already connected to the page, as a wallet
	// the customer connected on an earlier visit: eth_accounts answers the
	// account without eth_requestAccounts.
	Connected bool
	// Reject lists [ApprovalMethods] the user rejects (4001); see
	// [Wallet.Reject].
	Reject []string
}

// Wallet is the test wallet: an EIP-1193 provider injected into the pages of
// the tabs opened with [WithWallet], backed by a real key and real JSON-RPC
// endpoints. It is safe for concurrent use; one wallet may serve several tabs.
type Wallet struct {
	key     *ecdsa.PrivateKey
	address common.Address
	uuid    string
	cfg     WalletConfig

	mu        sync.Mutex
	chainID   uint64
	rpcURLs   map[uint64]string
	clients   map[uint64]*rpc.Client
	connected bool
	rejected  map[string]bool
	requests  []*WalletRequest
	tabs      []*Tab

	sendMu sync.Mutex // one transaction at a time, so nonces do not collide
}

// WalletRequest is one request the page made, as the wallet answered it.
type WalletRequest struct {
	// Method and Params are the page's request ({method, params}); Params is
	// the JSON the page passed ([] when it passed none).
	Method string
	Params json.RawMessage
	// ChainID is the wallet's active chain when the request arrived.
	ChainID uint64
	// Result is the JSON answer; nil while pending or on error.
	Result json.RawMessage
	// Err is the EIP-1193 error the request was answered with, if any.
	Err *ProviderError
	// Done says the request has been answered.
	Done bool
}

// TypedData decodes the typed data of an eth_signTypedData_v4 request.
func (r WalletRequest) TypedData() (apitypes.TypedData, error) {
	var td apitypes.TypedData
	if r.Method != "eth_signTypedData_v4" {
		return td, fmt.Errorf("browser: %s is not eth_signTypedData_v4", r.Method)
	}
	_, td, err := typedDataParams(r.Params)
	return td, err
}

// ProviderError is an EIP-1193 provider error, what the page's promise is
// rejected with (an Error with these code, message and data).
type ProviderError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *ProviderError) Error() string {
	return fmt.Sprintf("provider error %d: %s", e.Code, e.Message)
}

func perr(code int, format string, args ...any) *ProviderError {
	return &ProviderError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// NewWallet returns a test wallet. It panics on a configuration a test cannot
// mean: no key, or a starting chain without an endpoint.
func NewWallet(cfg WalletConfig) *Wallet {
	if cfg.Key == nil {
		panic("browser: NewWallet needs a Key")
	}
	w := &Wallet{
		key:       cfg.Key,
		address:   crypto.PubkeyToAddress(cfg.Key.PublicKey),
		uuid:      uuid.NewString(),
		cfg:       cfg,
		rpcURLs:   map[uint64]string{},
		clients:   map[uint64]*rpc.Client{},
		connected: cfg.Connected,
		rejected:  map[string]bool{},
	}
	for id, u := range cfg.RPC {
		w.rpcURLs[id] = u
	}
	w.chainID = cfg.ChainID
	if w.chainID == 0 && len(w.rpcURLs) > 0 {
		ids := make([]uint64, 0, len(w.rpcURLs))
		for id := range w.rpcURLs {
			ids = append(ids, id)
		}
		w.chainID = slices.Min(ids)
	}
	if _, ok := w.rpcURLs[w.chainID]; !ok {
		panic(fmt.Sprintf("browser: the wallet's chain %d has no RPC endpoint in WalletConfig.RPC", w.chainID))
	}
	w.Reject(cfg.Reject...)
	return w
}

// Address is the wallet's account.
func (w *Wallet) Address() common.Address { return w.address }

// ChainID is the wallet's active chain.
func (w *Wallet) ChainID() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.chainID
}

// Connected says whether the page has been given the account.
func (w *Wallet) Connected() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.connected
}

// Reject makes the user reject these [ApprovalMethods] (4001) until
// [Wallet.Accept]; a validation error still comes first, as in a real wallet.
// It panics on a method that needs no approval (a typo).
func (w *Wallet) Reject(methods ...string) {
	w.setRejected(true, methods)
}

// Accept undoes [Wallet.Reject] for these methods.
func (w *Wallet) Accept(methods ...string) {
	w.setRejected(false, methods)
}

func (w *Wallet) setRejected(v bool, methods []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range methods {
		if !slices.Contains(ApprovalMethods, m) {
			panic(fmt.Sprintf("browser: %q needs no approval; ApprovalMethods are %v", m, ApprovalMethods))
		}
		w.rejected[m] = v
	}
}

// Requests returns every request the pages made, in the order they arrived.
func (w *Wallet) Requests() []WalletRequest {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]WalletRequest, len(w.requests))
	for i, r := range w.requests {
		out[i] = *r
	}
	return out
}

// RequestsFor returns the requests of one method, in order.
func (w *Wallet) RequestsFor(method string) []WalletRequest {
	var out []WalletRequest
	for _, r := range w.Requests() {
		if r.Method == method {
			out = append(out, r)
		}
	}
	return out
}

// Methods returns the methods of the requests, in order: a compact view of
// what the page asked for.
func (w *Wallet) Methods() []string {
	var out []string
	for _, r := range w.Requests() {
		out = append(out, r.Method)
	}
	return out
}

// SwitchChain switches the wallet to a known chain as the user would in the
// wallet's own UI, telling the pages (chainChanged).
func (w *Wallet) SwitchChain(chainID uint64) error {
	w.mu.Lock()
	if _, ok := w.rpcURLs[chainID]; !ok {
		w.mu.Unlock()
		return fmt.Errorf("browser: chain %d is unknown to the wallet", chainID)
	}
	changed := w.chainID != chainID
	w.chainID = chainID
	w.mu.Unlock()
	if changed {
		w.emit(walletEvent{"chainChanged", hexutil.EncodeUint64(chainID)})
	}
	return nil
}

// Disconnect takes the account back from the pages, as the user would in the
// wallet's UI (accountsChanged with no account).
func (w *Wallet) Disconnect() {
	w.mu.Lock()
	was := w.connected
	w.connected = false
	w.mu.Unlock()
	if was {
		w.emit(walletEvent{"accountsChanged", []string{}})
	}
}

// Request sends one EIP-1193 request from Go, as a page would (it is
// recorded and its events reach the pages); params is anything that encodes
// to the params array, nil for none.
func (w *Wallet) Request(ctx context.Context, method string, params any) (json.RawMessage, error) {
	raw := json.RawMessage("[]")
	if params != nil {
		b, err := json.Marshal(params)
		if err != nil {
			return nil, err
		}
		raw = b
	}
	res, pe, events := w.answer(ctx, w.record(method, raw))
	w.emit(events...)
	if pe != nil {
		return nil, pe
	}
	return res, nil
}

// walletEvent is an EIP-1193 event for the pages' listeners.
type walletEvent struct {
	name string
	data any
}

// script is the provider's source for Page.addScriptToEvaluateOnNewDocument.
func (w *Wallet) script() string {
	cfg, _ := json.Marshal(map[string]any{
		"binding":        walletBinding,
		"settle":         walletSettle,
		"emit":           walletEmit,
		"uuid":           w.uuid,
		"name":           WalletName,
		"icon":           WalletIcon,
		"rdns":           WalletRDNS,
		"windowEthereum": !w.cfg.NoWindowEthereum,
	})
	return walletJS + "(" + string(cfg) + ");"
}

func (w *Wallet) attach(tab *Tab) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tabs = append(w.tabs, tab)
}

// emit tells every tab's page; a closed tab is skipped.
func (w *Wallet) emit(events ...walletEvent) {
	if len(events) == 0 {
		return
	}
	w.mu.Lock()
	tabs := slices.Clone(w.tabs)
	w.mu.Unlock()
	for _, tab := range tabs {
		for _, ev := range events {
			name, _ := json.Marshal(ev.name)
			data, _ := json.Marshal(ev.data)
			tab.evalQuiet(0, fmt.Sprintf("window.%s && window.%s(%s, %s)", walletEmit, walletEmit, name, data))
		}
	}
}

// record notes a request as it arrives.
func (w *Wallet) record(method string, params json.RawMessage) *WalletRequest {
	if len(params) == 0 || string(params) == "null" {
		params = json.RawMessage("[]")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	rec := &WalletRequest{Method: method, Params: slices.Clone(params), ChainID: w.chainID}
	w.requests = append(w.requests, rec)
	return rec
}

// answer handles a recorded request and notes the answer; the events are
// for the pages, after the answer.
func (w *Wallet) answer(ctx context.Context, rec *WalletRequest) (json.RawMessage, *ProviderError, []walletEvent) {
	res, pe, events := w.handle(ctx, rec.Method, rec.Params)
	var raw json.RawMessage
	if pe == nil {
		b, err := json.Marshal(res)
		if err != nil {
			pe = perr(CodeInternal, "encode result: %v", err)
		} else {
			raw = b
		}
	}
	w.mu.Lock()
	rec.Result, rec.Err, rec.Done = raw, pe, true
	w.mu.Unlock()
	return raw, pe, events
}

func (w *Wallet) handle(ctx context.Context, method string, params json.RawMessage) (any, *ProviderError, []walletEvent) {
	if slices.Contains(ReadMethods, method) {
		res, pe := w.passthrough(ctx, method, params)
		return res, pe, nil
	}
	switch method {
	case "eth_requestAccounts":
		if w.isRejected(method) {
			return nil, perr(CodeUserRejected, "User rejected the request."), nil
		}
		w.mu.Lock()
		was := w.connected
		w.connected = true
		w.mu.Unlock()
		var events []walletEvent
		if !was {
			events = append(events, walletEvent{"accountsChanged", w.accounts()})
		}
		return w.accounts(), nil, events
	case "eth_accounts":
		if !w.Connected() {
			return []string{}, nil, nil
		}
		return w.accounts(), nil, nil
	case "eth_chainId":
		return hexutil.EncodeUint64(w.ChainID()), nil, nil
	case "net_version":
		return strconv.FormatUint(w.ChainID(), 10), nil, nil
	case "wallet_switchEthereumChain":
		return w.switchChain(params)
	case "wallet_addEthereumChain":
		return w.addChain(params)
	case "eth_signTypedData_v4":
		res, pe := w.signTypedData(params)
		return res, pe, nil
	case "personal_sign":
		res, pe := w.personalSign(params)
		return res, pe, nil
	case "eth_sendTransaction":
		res, pe := w.sendTransaction(ctx, params)
		return res, pe, nil
	}
	return nil, perr(CodeUnsupportedMethod, "The test wallet does not support %s.", method), nil
}

func (w *Wallet) isRejected(method string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rejected[method]
}

// accounts is what eth_accounts answers: the account in lower case, as
// MetaMask gives it (a page comparing addresses must not rely on case).
func (w *Wallet) accounts() []string {
	return []string{strings.ToLower(w.address.Hex())}
}

// needAccount checks that the page was given the account and names it.
func (w *Wallet) needAccount(addr string) *ProviderError {
	if !w.Connected() {
		return perr(CodeUnauthorized, "The requested account and/or method has not been authorized by the user.")
	}
	if !common.IsHexAddress(addr) {
		return perr(CodeInvalidParams, "Invalid parameters: must provide an Ethereum address.")
	}
	if common.HexToAddress(addr) != w.address {
		return perr(CodeUnauthorized, "The requested account %s has not been authorized by the user.", addr)
	}
	return nil
}

func parseChainID(s string) (uint64, *ProviderError) {
	if !strings.HasPrefix(s, "0x") {
		return 0, perr(CodeInvalidParams, "Invalid chainId %q: expected a 0x-prefixed hexadecimal string.", s)
	}
	id, err := hexutil.DecodeUint64(s)
	if err != nil || id == 0 {
		return 0, perr(CodeInvalidParams, "Invalid chainId %q: %v", s, err)
	}
	return id, nil
}

func (w *Wallet) switchChain(params json.RawMessage) (any, *ProviderError, []walletEvent) {
	var p []struct {
		ChainID string `json:"chainId"`
	}
	if err := json.Unmarshal(params, &p); err != nil || len(p) != 1 {
		return nil, perr(CodeInvalidParams, "wallet_switchEthereumChain expects [{chainId}]"), nil
	}
	id, pe := parseChainID(p[0].ChainID)
	if pe != nil {
		return nil, pe, nil
	}
	w.mu.Lock()
	_, known := w.rpcURLs[id]
	w.mu.Unlock()
	if !known {
		return nil, perr(CodeUnrecognizedChain, "Unrecognized chain ID %q. Try adding the chain using wallet_addEthereumChain first.", p[0].ChainID), nil
	}
	if w.isRejected("wallet_switchEthereumChain") {
		return nil, perr(CodeUserRejected, "User rejected the request."), nil
	}
	return nil, nil, w.setChain(id)
}

// setChain makes id active and says so when it changed.
func (w *Wallet) setChain(id uint64) []walletEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.chainID == id {
		return nil
	}
	w.chainID = id
	return []walletEvent{{"chainChanged", hexutil.EncodeUint64(id)}}
}

// addChain adds the chain and, as MetaMask does once the user approves,
// switches to it.
func (w *Wallet) addChain(params json.RawMessage) (any, *ProviderError, []walletEvent) {
	var p []struct {
		ChainID   string   `json:"chainId"`
		ChainName string   `json:"chainName"`
		RPCURLs   []string `json:"rpcUrls"`
	}
	if err := json.Unmarshal(params, &p); err != nil || len(p) != 1 {
		return nil, perr(CodeInvalidParams, "wallet_addEthereumChain expects [{chainId, chainName, rpcUrls, nativeCurrency}]"), nil
	}
	id, pe := parseChainID(p[0].ChainID)
	if pe != nil {
		return nil, pe, nil
	}
	url := w.cfg.AddChainRPC[id]
	if url == "" {
		if len(p[0].RPCURLs) == 0 || p[0].RPCURLs[0] == "" {
			return nil, perr(CodeInvalidParams, "wallet_addEthereumChain: rpcUrls is empty"), nil
		}
		url = p[0].RPCURLs[0]
	}
	if w.isRejected("wallet_addEthereumChain") {
		return nil, perr(CodeUserRejected, "User rejected the request."), nil
	}
	w.mu.Lock()
	if _, known := w.rpcURLs[id]; !known {
		w.rpcURLs[id] = url
	}
	w.mu.Unlock()
	return nil, nil, w.setChain(id)
}

// typedDataParams decodes [address, JSON string of the typed data]. The
// typed data must be a string, as eth_signTypedData_v4 specifies: some
// wallets refuse an object, so the test wallet does too.
func typedDataParams(params json.RawMessage) (string, apitypes.TypedData, error) {
	var td apitypes.TypedData
	var p []json.RawMessage
	if err := json.Unmarshal(params, &p); err != nil || len(p) != 2 {
		return "", td, errors.New("eth_signTypedData_v4 expects [address, typedData]")
	}
	var addr, doc string
	if err := json.Unmarshal(p[0], &addr); err != nil {
		return "", td, errors.New("eth_signTypedData_v4: the first parameter must be the address")
	}
	if err := json.Unmarshal(p[1], &doc); err != nil {
		return addr, td, errors.New("eth_signTypedData_v4: the typed data must be a JSON string")
	}
	if err := json.Unmarshal([]byte(doc), &td); err != nil {
		return addr, td, fmt.Errorf("eth_signTypedData_v4: typed data: %v", err)
	}
	return addr, td, nil
}

func (w *Wallet) signTypedData(params json.RawMessage) (any, *ProviderError) {
	addr, td, err := typedDataParams(params)
	if err != nil {
		return nil, perr(CodeInvalidParams, "%v", err)
	}
	if pe := w.needAccount(addr); pe != nil {
		return nil, pe
	}
	if td.Domain.ChainId != nil {
		active := w.ChainID()
		if (*big.Int)(td.Domain.ChainId).Cmp(new(big.Int).SetUint64(active)) != 0 {
			return nil, perr(CodeInvalidParams, "Provided chainId %q must match the active chainId %q", (*big.Int)(td.Domain.ChainId).String(), strconv.FormatUint(active, 10))
		}
	}
	hash, _, err := apitypes.TypedDataAndHash(td)
	if err != nil {
		return nil, perr(CodeInvalidParams, "eth_signTypedData_v4: %v", err)
	}
	if w.isRejected("eth_signTypedData_v4") {
		return nil, perr(CodeUserRejected, "User rejected the request.")
	}
	return w.sign(hash)
}

func (w *Wallet) personalSign(params json.RawMessage) (any, *ProviderError) {
	var p []string
	if err := json.Unmarshal(params, &p); err != nil || len(p) < 2 {
		return nil, perr(CodeInvalidParams, "personal_sign expects [message, address]")
	}
	if pe := w.needAccount(p[1]); pe != nil {
		return nil, pe
	}
	msg := []byte(p[0])
	if b, err := hexutil.Decode(p[0]); err == nil {
		msg = b
	}
	if w.isRejected("personal_sign") {
		return nil, perr(CodeUserRejected, "User rejected the request.")
	}
	return w.sign(accounts.TextHash(msg))
}

// sign returns the 65-byte r‖s‖v signature of a digest, v = 27 or 28.
func (w *Wallet) sign(digest []byte) (any, *ProviderError) {
	sig, err := crypto.Sign(digest, w.key)
	if err != nil {
		return nil, perr(CodeInternal, "sign: %v", err)
	}
	sig[crypto.RecoveryIDOffset] += 27
	return hexutil.Encode(sig), nil
}

// client returns the RPC client of the active chain.
func (w *Wallet) client(ctx context.Context) (*rpc.Client, uint64, *ProviderError) {
	w.mu.Lock()
	defer w.mu.Unlock()
	id := w.chainID
	if c, ok := w.clients[id]; ok {
		return c, id, nil
	}
	c, err := rpc.DialContext(ctx, w.rpcURLs[id])
	if err != nil {
		return nil, id, perr(CodeChainDisconnected, "chain %d: %v", id, err)
	}
	w.clients[id] = c
	return c, id, nil
}

// rpcError turns an RPC failure into a provider error, keeping the node's
// code, message and revert data.
func rpcError(err error) *ProviderError {
	var re rpc.Error
	if errors.As(err, &re) {
		pe := &ProviderError{Code: re.ErrorCode(), Message: re.Error()}
		var de rpc.DataError
		if errors.As(err, &de) {
			pe.Data = de.ErrorData()
		}
		return pe
	}
	return perr(CodeInternal, "%v", err)
}

func (w *Wallet) passthrough(ctx context.Context, method string, params json.RawMessage) (any, *ProviderError) {
	var args []json.RawMessage
	if err := json.Unmarshal(params, &args); err != nil {
		return nil, perr(CodeInvalidParams, "%s: params must be an array", method)
	}
	c, _, pe := w.client(ctx)
	if pe != nil {
		return nil, pe
	}
	anyArgs := make([]any, len(args))
	for i, a := range args {
		anyArgs[i] = a
	}
	var res json.RawMessage
	if err := c.CallContext(ctx, &res, method, anyArgs...); err != nil {
		return nil, rpcError(err)
	}
	if res == nil {
		res = json.RawMessage("null")
	}
	return res, nil
}

// txArgs is eth_sendTransaction's transaction object.
type txArgs struct {
	From                 *common.Address `json:"from"`
	To                   *common.Address `json:"to"`
	Gas                  *hexutil.Uint64 `json:"gas"`
	GasPrice             *hexutil.Big    `json:"gasPrice"`
	MaxFeePerGas         *hexutil.Big    `json:"maxFeePerGas"`
	MaxPriorityFeePerGas *hexutil.Big    `json:"maxPriorityFeePerGas"`
	Value                *hexutil.Big    `json:"value"`
	Nonce                *hexutil.Uint64 `json:"nonce"`
	Data                 *hexutil.Bytes  `json:"data"`
	Input                *hexutil.Bytes  `json:"input"`
	ChainID              *hexutil.Big    `json:"chainId"`
}

// sendTransaction fills what the page left out (nonce, gas by estimate,
// EIP-1559 fees from the chain), signs and sends through the active chain's
// endpoint, and answers the hash.
func (w *Wallet) sendTransaction(ctx context.Context, params json.RawMessage) (any, *ProviderError) {
	var p []txArgs
	if err := json.Unmarshal(params, &p); err != nil || len(p) != 1 {
		return nil, perr(CodeInvalidParams, "eth_sendTransaction expects [{from, to, value, data}]: %v", err)
	}
	a := p[0]
	if a.From == nil {
		return nil, perr(CodeInvalidParams, "eth_sendTransaction: from is required")
	}
	if pe := w.needAccount(a.From.Hex()); pe != nil {
		return nil, pe
	}
	if a.Data != nil && a.Input != nil && !slices.Equal(*a.Data, *a.Input) {
		return nil, perr(CodeInvalidParams, "eth_sendTransaction: data and input differ")
	}
	var data []byte
	if a.Input != nil {
		data = *a.Input
	} else if a.Data != nil {
		data = *a.Data
	}
	value := new(big.Int)
	if a.Value != nil {
		value = a.Value.ToInt()
	}
	rc, chainID, pe := w.client(ctx)
	if pe != nil {
		return nil, pe
	}
	if a.ChainID != nil && a.ChainID.ToInt().Cmp(new(big.Int).SetUint64(chainID)) != 0 {
		return nil, perr(CodeInvalidParams, "eth_sendTransaction: chainId %s is not the active chain %d", a.ChainID.ToInt(), chainID)
	}
	if w.isRejected("eth_sendTransaction") {
		return nil, perr(CodeUserRejected, "User denied transaction signature.")
	}
	ec := ethclient.NewClient(rc)

	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	var nonce uint64
	if a.Nonce != nil {
		nonce = uint64(*a.Nonce)
	} else {
		n, err := ec.PendingNonceAt(ctx, w.address)
		if err != nil {
			return nil, rpcError(err)
		}
		nonce = n
	}
	tip := (*big.Int)(a.MaxPriorityFeePerGas)
	if tip == nil {
		t, err := ec.SuggestGasTipCap(ctx)
		if err != nil {
			return nil, rpcError(err)
		}
		tip = t
	}
	feeCap := (*big.Int)(a.MaxFeePerGas)
	if feeCap == nil && a.GasPrice != nil {
		feeCap = a.GasPrice.ToInt()
	}
	if feeCap == nil {
		head, err := ec.HeaderByNumber(ctx, nil)
		if err != nil {
			return nil, rpcError(err)
		}
		base := head.BaseFee
		if base == nil {
			base = new(big.Int)
		}
		feeCap = new(big.Int).Add(new(big.Int).Mul(base, big.NewInt(2)), tip)
	}
	var gas uint64
	if a.Gas != nil {
		gas = uint64(*a.Gas)
	} else {
		g, err := ec.EstimateGas(ctx, ethereum.CallMsg{From: w.address, To: a.To, Value: value, Data: data})
		if err != nil {
			return nil, rpcError(err)
		}
		gas = g
	}
	id := new(big.Int).SetUint64(chainID)
	tx, err := types.SignNewTx(w.key, types.LatestSignerForChainID(id), &types.DynamicFeeTx{
		ChainID: id, Nonce: nonce, GasTipCap: tip, GasFeeCap: feeCap, Gas: gas,
		To: a.To, Value: value, Data: data,
	})
	if err != nil {
		return nil, perr(CodeInternal, "sign transaction: %v", err)
	}
	if err := ec.SendTransaction(ctx, tx); err != nil {
		return nil, rpcError(err)
	}
	return tx.Hash().Hex(), nil
}
