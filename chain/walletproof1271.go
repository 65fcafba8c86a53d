package chain

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"strings"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
)

// ContractWalletClient is what checking a contract wallet's signature needs
// of an EVM JSON-RPC client (*ethclient.Client and the simulated backend's
// client satisfy it).
type ContractWalletClient interface {
	ethereum.ChainIDReader
	ethereum.ContractCaller
	CodeAt(ctx context.Context, account common.Address, blockNumber *big.Int) ([]byte, error)
}

// eip1271Magic is the answer of a contract wallet that accepts a signature
// (EIP-1271): isValidSignature(bytes32,bytes)'s selector as an ABI-encoded
// bytes4, the whole 32-byte word (a contract that echoes its calldata
// answers the selector followed by the hash: no wallet's yes).
var eip1271Magic = common.RightPadBytes([]byte{0x16, 0x26, 0xba, 0x7e}, 32)

var eip1271ABI = func() abi.ABI {
	a, err := abi.JSON(strings.NewReader(`[{"type":"function","name":"isValidSignature","stateMutability":"view",
		"inputs":[{"name":"hash","type":"bytes32"},{"name":"signature","type":"bytes"}],
		"outputs":[{"name":"magicValue","type":"bytes4"}]}]`))
	if err != nil {
		panic(err)
	}
	return a
}()

// ErrContractCheck wraps a failure to ask the chain (the RPC endpoint
// unreachable, answering another chain): no verdict on the signature.
var ErrContractCheck = errors.New("could not ask the chain")

// VerifyContractWalletProof checks a proof signed by a smart contract
// wallet (a Safe, a smart account) on network n: the wallet is a contract
// there, and its isValidSignature(hash, signature) answers EIP-1271's magic
// value for the message's EIP-191 hash (what personal_sign signs, and what
// such wallets check their owners' signatures against). signature is hex,
// any length (a Safe concatenates its owners' signatures; "0x" asks about a
// message the Safe approved on chain). A refusal wraps ErrBadWalletProof;
// a chain that could not be asked, ErrContractCheck.
func VerifyContractWalletProof(ctx context.Context, c ContractWalletClient, n Network, address, message, signature string) error {
	sig, err := hex.DecodeString(strings.TrimPrefix(strings.TrimSpace(signature), "0x"))
	if err != nil {
		return proofErr("signature: must be hex, as the contract wallet gave it")
	}
	unchecked := func(err error) error {
		return fmt.Errorf("%w: %s: %w", ErrContractCheck, n.Name, scrubRPC(err, n.RPCURL))
	}
	if id, err := c.ChainID(ctx); err != nil {
		return unchecked(err)
	} else if !id.IsUint64() || id.Uint64() != n.ChainID {
		return fmt.Errorf("%w: %s's RPC endpoint answers chain id %s, not %d", ErrContractCheck, n.Name, id, n.ChainID)
	}
	wallet := common.HexToAddress(address)
	code, err := c.CodeAt(ctx, wallet, nil)
	if err != nil {
		return unchecked(err)
	}
	if len(code) == 0 {
		return proofErr("signature: not the wallet's, and " + address + " is no contract on " + n.Name +
			" (a contract wallet is proven on a network where it is deployed)")
	}
	var hash [32]byte
	copy(hash[:], accounts.TextHash([]byte(message)))
	data, err := eip1271ABI.Pack("isValidSignature", hash, sig)
	if err != nil {
		return proofErr("signature: " + err.Error())
	}
	out, err := c.CallContract(ctx, ethereum.CallMsg{To: &wallet, Data: data}, nil)
	if err != nil {
		// A revert is the wallet's answer (it refuses); anything else (a
		// rate limit, a node behind) is the endpoint's failure, no verdict.
		if reverted(err) {
			return proofErr("signature: the contract wallet refuses it (EIP-1271 isValidSignature reverted)")
		}
		return unchecked(err)
	}
	if len(out) < 32 || !bytes.Equal(out[:32], eip1271Magic) {
		return proofErr("signature: the contract wallet refuses it (EIP-1271 isValidSignature did not answer its magic value)")
	}
	return nil
}

// reverted says whether an eth_call's error is the call reverting (JSON-RPC
// error code 3, or a node's "execution reverted"), not the endpoint failing.
func reverted(err error) bool {
	var coded interface{ ErrorCode() int }
	if errors.As(err, &coded) && coded.ErrorCode() == 3 {
		return true
	}
	return strings.Contains(err.Error(), "execution reverted")
}
