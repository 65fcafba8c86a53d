package api

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/gin-gonic/gin"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
)

// Wallet proofs: a merchant proves it controls a receiving wallet by
// signing, with the wallet, a message naming the wallet and the merchant
// (chain.WalletProof). Nothing is stored until the signature verifies; the
// message is rebuilt from its fields, so the client sends the time the
// message was issued, not the message.
func (s *Server) registerWalletProofs(g *gin.RouterGroup) {
	s.Handle(g, http.MethodGet, "/merchant/wallet-proofs", AuthSession, s.listWalletProofs)
	s.Handle(g, http.MethodPost, "/merchant/wallet-proofs/message", AuthSession, s.walletProofMessage)
	s.Handle(g, http.MethodPost, "/merchant/wallet-proofs", AuthSession, s.proveWallet)
	s.Handle(g, http.MethodDelete, "/merchant/wallet-proofs/:address", AuthSession, s.deleteWalletProof)
}

// walletProof is the proof message of the merchant's wallet issued at
// issued: its nonce is the server's MAC over the merchant, the wallet and
// the time, so a message dated ahead (signed now by an owner who will not
// own the wallet then) cannot be made.
func (s *Server) walletProof(c *gin.Context, address string, issued time.Time) (chain.WalletProof, error) {
	p := principal(c)
	m, err := s.Store.Merchant(c.Request.Context(), p.MerchantID)
	if err != nil {
		return chain.WalletProof{}, err
	}
	issued = issued.UTC().Truncate(time.Second)
	mac := s.Hasher.Sign("wallet-proof", []byte(p.MerchantID+"\n"+address+"\n"+issued.Format(time.RFC3339)))
	return chain.WalletProof{Address: address, MerchantID: p.MerchantID, Account: m.Email, Issued: issued,
		Nonce: hex.EncodeToString(mac[:16])}, nil
}

type walletProofJSON struct {
	Address string `json:"address"`
	Family  string `json:"family"`
	// Network: where a contract wallet's proof (EIP-1271) was checked, and
	// holds; null for a key's, which holds on every network of its family.
	Network  *string `json:"network"`
	ProvedAt Time    `json:"provedAt"`
}

type walletProofMessageJSON struct {
	Address   string `json:"address"`
	Family    string `json:"family"`
	IssuedAt  Time   `json:"issuedAt"`
	ExpiresAt Time   `json:"expiresAt"`
	Message   string `json:"message"`
	// ProvenByAnotherMerchant: another merchant account proved the wallet
	// (and this one did not): payments to it are not this merchant's, and
	// its links that name it take none (naming it anew is refused, a 400).
	ProvenByAnotherMerchant bool `json:"provenByAnotherMerchant"`
	// ProvenByAnotherMerchantOn: where, when only contract wallets' proofs
	// of other merchants stand (they hold on their networks alone); null
	// when another merchant's key proved it (everywhere) or none did.
	ProvenByAnotherMerchantOn []string `json:"provenByAnotherMerchantOn"`
	// NotProvenOn: the networks on which this merchant's active links,
	// hosted checkouts or subscriptions name the wallet while it is its
	// contract wallet proven on other networks only: they take no new
	// payment there until it is proven there too (empty when none).
	NotProvenOn []string `json:"notProvenOn"`
}

// walletProofCreatedJSON is a proof just recorded, with where the
// merchant's links and subscriptions still cannot use it (NotProvenOn).
type walletProofCreatedJSON struct {
	walletProofJSON
	NotProvenOn []string `json:"notProvenOn"`
}

// walletFamily reads an EVM or a Solana address as its family and
// canonical form.
func (v *checker) walletFamily(field, s string) (chain.Family, string) {
	s = strings.TrimSpace(s)
	if s == "" {
		v.Add(field, "is required")
		return "", ""
	}
	for _, fam := range []chain.Family{chain.FamilyEVM, chain.FamilySolana} {
		if a, err := chain.ParseAddress(fam, s); err == nil {
			return fam, a
		}
	}
	v.Add(field, "must be an EVM (0x + 40 hex) or Solana (base58, 32 bytes) address")
	return "", ""
}

func (s *Server) listWalletProofs(c *gin.Context) {
	proofs, err := s.Store.WalletProofs(c.Request.Context(), principal(c).MerchantID)
	if err != nil {
		fail(c, err)
		return
	}
	out := make([]walletProofJSON, 0, len(proofs))
	for _, p := range proofs {
		out = append(out, toWalletProofJSON(&p))
	}
	respondArray(c, out)
}

func toWalletProofJSON(p *models.WalletProof) walletProofJSON {
	out := walletProofJSON{Address: p.Address, Family: p.Family, ProvedAt: Time(p.ProvedAt)}
	if p.Network != "" {
		out.Network = &p.Network
	}
	return out
}

type walletProofMessageRequest struct {
	Address string `json:"address"`
}

// walletProofMessage answers the message to sign for a wallet, issued now.
func (s *Server) walletProofMessage(c *gin.Context) {
	var req walletProofMessageRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	fam, addr := v.walletFamily("address", req.Address)
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	wp, err := s.walletProof(c, addr, s.Store.Now())
	if err != nil {
		fail(c, err)
		return
	}
	provers, err := s.Store.WalletProvers(c.Request.Context(), []string{addr})
	if err != nil {
		fail(c, err)
		return
	}
	everywhere, on := provers.ProvenByOthers(addr, principal(c).MerchantID)
	notProven, err := s.Store.WalletNotProvenOn(c.Request.Context(), principal(c).MerchantID, addr)
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, walletProofMessageJSON{Address: addr, Family: string(fam), IssuedAt: Time(wp.Issued),
		ExpiresAt: Time(wp.Issued.Add(chain.WalletProofValidity)), Message: wp.Message(), ProvenByAnotherMerchant: everywhere || len(on) > 0,
		ProvenByAnotherMerchantOn: on, NotProvenOn: nonNil(notProven)})
}

type proveWalletRequest struct {
	Address   string `json:"address"`
	IssuedAt  string `json:"issuedAt"`
	Signature string `json:"signature"`
	// Network names the EVM network a smart contract wallet is deployed
	// on: a signature its key does not give is asked of the wallet there.
	Network string `json:"network"`
}

// maxProofSignature bounds a proof's signature (hex): a Safe concatenates
// 65 bytes per owner, and 30 owners is more than any treasury uses.
const maxProofSignature = 4096

// contractCheckTimeout bounds asking a contract wallet about its proof.
const contractCheckTimeout = 15 * time.Second

// proveWallet verifies the wallet's signature over the message issued at
// issuedAt and records the proof: 201, or 200 with the first proof when the
// wallet was proven before (on that network, for a contract wallet).
//
// A signature by the wallet's key proves it on every network of its
// family. A smart contract wallet (a Safe, a smart account) signs nothing a
// key recovers: with network, a signature that is not the key's is asked
// of the wallet on that network (EIP-1271 isValidSignature over the
// message's EIP-191 hash), and the proof holds on that network only (the
// same address on another chain may be another party's contract).
func (s *Server) proveWallet(c *gin.Context) {
	var req proveWalletRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	fam, addr := v.walletFamily("address", req.Address)
	now := s.Store.Now()
	issued, terr := time.Parse(time.RFC3339Nano, strings.TrimSpace(req.IssuedAt))
	switch {
	case strings.TrimSpace(req.IssuedAt) == "":
		v.Add("issuedAt", "is required (the issuedAt of POST /api/merchant/wallet-proofs/message)")
	case terr != nil:
		v.Add("issuedAt", "must be an RFC 3339 time")
	case issued.After(now.Add(time.Minute)):
		v.Add("issuedAt", "is in the future")
	case now.Sub(issued) > chain.WalletProofValidity:
		v.Add("issuedAt", "the message is older than 15 minutes: ask for a new one and sign it")
	}
	if strings.TrimSpace(req.Signature) == "" {
		v.Add("signature", "is required")
	} else if len(strings.TrimSpace(req.Signature)) > maxProofSignature {
		v.Add("signature", fmt.Sprintf("must be at most %d characters", maxProofSignature))
	}
	var contractNet chain.Network
	if network := strings.TrimSpace(req.Network); network != "" {
		n, ok := s.Networks.Lookup(network)
		switch {
		case !ok:
			v.Add("network", "unknown network: must be one of "+strings.Join(s.evmNetworks(), ", "))
		case n.Family != chain.FamilyEVM:
			v.Add("network", "a contract wallet is proven on an EVM network")
		case fam != "" && fam != chain.FamilyEVM:
			v.Add("network", "only an EVM contract wallet is proven on a network: leave it out for a Solana wallet")
		}
		contractNet = n
	}
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	p := principal(c)
	wp, err := s.walletProof(c, addr, issued)
	if err != nil {
		fail(c, err)
		return
	}
	msg := wp.Message()
	scope := ""
	if err := chain.VerifyWalletProof(fam, addr, msg, req.Signature); err != nil {
		if contractNet.Name == "" {
			if fam == chain.FamilyEVM {
				err = fmt.Errorf("%w (a smart contract wallet: name the network it is deployed on, network)", err)
			}
			v.addProofErr(err)
			fail(c, v.err())
			return
		}
		if err := s.verifyContractWallet(c, contractNet, addr, msg, req.Signature); err != nil {
			fail(c, err)
			return
		}
		scope = contractNet.Name
	}
	proof := &models.WalletProof{MerchantID: p.MerchantID, Family: string(fam), Address: addr, Network: scope, Message: msg,
		Signature: strings.TrimSpace(req.Signature), ProvedAt: now}
	created, err := s.Store.RecordWalletProof(c.Request.Context(), proof, maxWalletProofs)
	if err != nil {
		fail(c, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		s.Logger.Info("wallet proven", "requestId", requestID(c), "merchantId", p.MerchantID, "address", addr)
	}
	notProven, err := s.Store.WalletNotProvenOn(c.Request.Context(), p.MerchantID, addr)
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, status, walletProofCreatedJSON{walletProofJSON: toWalletProofJSON(proof), NotProvenOn: nonNil(notProven)})
}

// addProofErr adds a refused proof's reason under the field it names
// (chain's reasons start with "signature: " or "address: "; the field is
// not said twice).
func (v *checker) addProofErr(err error) {
	field, reason, ok := strings.Cut(err.Error(), ": ")
	if !ok || (field != "signature" && field != "address") {
		field, reason = "signature", err.Error()
	}
	v.Add(field, reason)
}

// evmNetworks names the configured EVM networks, test mode's first.
func (s *Server) evmNetworks() []string {
	var out []string
	for _, mode := range []chain.Mode{chain.ModeTest, chain.ModeLive} {
		for _, name := range s.Networks.Names(mode) {
			if fam, _ := chain.FamilyOf(name); fam == chain.FamilyEVM {
				out = append(out, name)
			}
		}
	}
	return out
}

// verifyContractWallet asks the contract wallet on n whether signature is
// its own over msg: nil, a 400 naming signature, or a 503 when the network
// could not be asked (no verdict: the merchant tries again).
func (s *Server) verifyContractWallet(c *gin.Context, n chain.Network, addr, msg, signature string) error {
	ctx, cancel := context.WithTimeout(c.Request.Context(), contractCheckTimeout)
	defer cancel()
	dial := s.DialContractWallet
	if dial == nil {
		dial = func(ctx context.Context, n chain.Network) (chain.ContractWalletClient, error) {
			return ethclient.DialContext(ctx, n.RPCURL)
		}
	}
	client, err := dial(ctx, n)
	if err != nil {
		err = chain.ScrubRPC(err, n.RPCURL)
	} else {
		err = chain.VerifyContractWalletProof(ctx, client, n, addr, msg, signature)
		if cl, ok := client.(interface{ Close() }); ok {
			cl.Close()
		}
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, chain.ErrBadWalletProof):
		var v checker
		v.addProofErr(err)
		return v.err()
	}
	s.Logger.Warn("contract wallet proof not checked", "requestId", requestID(c), "network", n.Name, "address", addr, "err", err)
	return apperr.Unavailable("could not ask "+n.Name+" about the contract wallet; try again", 5*time.Second)
}

// maxWalletProofs bounds the wallets a merchant proves (keys are free to
// make: a merchant proving wallets by the thousand would only fill a list).
const maxWalletProofs = 50

// deleteWalletProof withdraws the merchant's proof of a wallet (it no
// longer controls it, or no longer uses it): the wallet is free for another
// merchant to name, and its transfers are no longer the merchant's alone.
func (s *Server) deleteWalletProof(c *gin.Context) {
	var v checker
	_, addr := v.walletFamily("address", c.Param("address"))
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	if err := s.Store.DeleteWalletProof(c.Request.Context(), principal(c).MerchantID, addr); err != nil {
		fail(c, err)
		return
	}
	respondMessage(c, http.StatusOK, "wallet proof withdrawn")
}
