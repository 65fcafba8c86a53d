package soldev

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/programs/system"
	"github.com/gagliardetto/solana-go/programs/token"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/paygate/paygate/chain"
)

// Test chain timing: 100 ms slots, finalized 10 slots (about 1 s) after a
// transaction lands, so the confirmed-but-not-finalized window is wide
// enough to observe on a loaded machine.
const (
	testSlot          = 100 * time.Millisecond
	testFinalizeDepth = 10
)

var (
	sharedOnce  sync.Once
	sharedChain *Chain
	sharedErr   error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedChain != nil {
		_ = sharedChain.Close()
	}
	os.Exit(code)
}

// requireSidecar skips (or, under CI=true, fails) when Node.js or the npm
// packages are missing, with what to run.
func requireSidecar(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, ErrNodeMissing) || errors.Is(err, ErrPackagesMissing) {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// testChain returns the chain shared by the tests of this package.
func testChain(t *testing.T) *Chain {
	t.Helper()
	sharedOnce.Do(func() {
		sharedChain, sharedErr = Start(context.Background(), Config{SlotInterval: testSlot, FinalizeDepth: testFinalizeDepth, Log: os.Stderr})
	})
	requireSidecar(t, sharedErr)
	return sharedChain
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitStatus polls getSignatureStatuses until sig reaches the commitment.
func waitStatus(ctx context.Context, client *rpc.Client, sig solana.Signature, want rpc.ConfirmationStatusType) (*rpc.SignatureStatusesResult, error) {
	rank := map[rpc.ConfirmationStatusType]int{rpc.ConfirmationStatusProcessed: 1, rpc.ConfirmationStatusConfirmed: 2, rpc.ConfirmationStatusFinalized: 3}
	for {
		res, err := client.GetSignatureStatuses(ctx, false, sig)
		if err != nil {
			return nil, err
		}
		if st := res.Value[0]; st != nil && rank[st.ConfirmationStatus] >= rank[want] {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s not %s: %w", sig, want, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// sendAndFinalize sends and waits until the transaction is finalized.
func sendAndFinalize(ctx context.Context, client *rpc.Client, ixs []solana.Instruction, signers []solana.PrivateKey, o sendOptions) (solana.Signature, error) {
	sig, err := send(ctx, client, ixs, signers, o)
	if err != nil {
		return sig, err
	}
	st, err := waitStatus(ctx, client, sig, rpc.ConfirmationStatusFinalized)
	if err == nil && st.Err != nil {
		err = fmt.Errorf("transaction %s failed: %v", sig, st.Err)
	}
	return sig, err
}

// devNetwork is solana_devnet pointed at c.
func devNetwork(c *Chain) chain.Network {
	reg := chain.DefaultRegistry()
	DevNetwork(c, reg)
	n, _ := reg.Lookup(chain.NetworkSolanaDevnet)
	return n
}

// createMint creates a classic SPL Token mint with 6 decimals owned by
// authority and mints units to authority's associated token account.
func createMint(ctx context.Context, client *rpc.Client, authority solana.PrivateKey, units uint64) (solana.PublicKey, error) {
	mint := solana.NewWallet().PrivateKey
	rent, err := client.GetMinimumBalanceForRentExemption(ctx, 82, rpc.CommitmentConfirmed)
	if err != nil {
		return solana.PublicKey{}, err
	}
	owner := authority.PublicKey()
	ata, _ := associatedTokenAddress(owner, mint.PublicKey(), solana.TokenProgramID)
	ixs := []solana.Instruction{
		system.NewCreateAccountInstruction(rent, 82, solana.TokenProgramID, owner, mint.PublicKey()).Build(),
		token.NewInitializeMint2Instruction(6, owner, owner, mint.PublicKey()).Build(),
		createATAIdempotent(owner, owner, mint.PublicKey(), solana.TokenProgramID),
		token.NewMintToInstruction(units, mint.PublicKey(), ata, owner, nil).Build(),
	}
	_, err = sendAndFinalize(ctx, client, ixs, []solana.PrivateKey{authority, mint}, sendOptions{})
	return mint.PublicKey(), err
}

// createLookupTable creates an address lookup table holding addresses,
// owned and paid by authority, and waits until it can be used (the slot
// after its extension).
func createLookupTable(ctx context.Context, client *rpc.Client, authority solana.PrivateKey, addresses ...solana.PublicKey) (solana.PublicKey, error) {
	slot, err := client.GetSlot(ctx, rpc.CommitmentFinalized)
	if err != nil {
		return solana.PublicKey{}, err
	}
	owner := authority.PublicKey()
	var slotLE [8]byte
	binary.LittleEndian.PutUint64(slotLE[:], slot)
	table, bump, err := solana.FindProgramAddress([][]byte{owner[:], slotLE[:]}, solana.AddressLookupTableProgramID)
	if err != nil {
		return solana.PublicKey{}, err
	}
	create := binary.LittleEndian.AppendUint32(nil, 0) // CreateLookupTable{recent_slot, bump_seed}
	create = append(binary.LittleEndian.AppendUint64(create, slot), bump)
	extend := binary.LittleEndian.AppendUint32(nil, 2) // ExtendLookupTable{new_addresses}
	extend = binary.LittleEndian.AppendUint64(extend, uint64(len(addresses)))
	for _, a := range addresses {
		extend = append(extend, a[:]...)
	}
	accounts := func() solana.AccountMetaSlice {
		return solana.AccountMetaSlice{solana.Meta(table).WRITE(), solana.Meta(owner).SIGNER(), solana.Meta(owner).WRITE().SIGNER(), solana.Meta(solana.SystemProgramID)}
	}
	ixs := []solana.Instruction{
		solana.NewInstruction(solana.AddressLookupTableProgramID, accounts(), create),
		solana.NewInstruction(solana.AddressLookupTableProgramID, accounts(), extend),
	}
	// Finalized means several slots have passed since the extension.
	_, err = sendAndFinalize(ctx, client, ixs, []solana.PrivateKey{authority}, sendOptions{})
	return table, err
}
