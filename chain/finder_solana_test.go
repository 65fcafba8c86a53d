package chain

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"
)

// signatureNode answers getSignaturesForAddress from a map and fails on
// the keys in broken.
type signatureNode struct {
	sigs   map[solana.PublicKey][]*rpc.TransactionSignature
	broken map[solana.PublicKey]bool
	asked  int
}

func (n *signatureNode) GetTransaction(context.Context, solana.Signature, *rpc.GetTransactionOpts) (*rpc.GetTransactionResult, error) {
	return nil, errors.New("not used")
}

func (n *signatureNode) GetSignaturesForAddressWithOpts(_ context.Context, key solana.PublicKey, _ *rpc.GetSignaturesForAddressOpts) ([]*rpc.TransactionSignature, error) {
	n.asked++
	if n.broken[key] {
		return nil, errors.New("rpc: 429 too many requests")
	}
	return n.sigs[key], nil
}

// A reference the node fails on does not hide the payments of the
// references after it: they are found, and the error names what was not
// searched.
func TestFindReferencesSkipsAFailingKey(t *testing.T) {
	bad, good := solana.NewWallet().PublicKey(), solana.NewWallet().PublicKey()
	var sig solana.Signature
	sig[0] = 7
	node := &signatureNode{
		sigs:   map[solana.PublicKey][]*rpc.TransactionSignature{good: {{Signature: sig, Slot: 42}}},
		broken: map[solana.PublicKey]bool{bad: true},
	}
	v, err := NewSolanaVerifier(Network{Name: NetworkSolanaDevnet, Family: FamilySolana, USDC: solana.NewWallet().PublicKey().String()}, node)
	if err != nil {
		t.Fatal(err)
	}
	found, err := v.findReferences(context.Background(), []string{bad.String(), good.String()})
	if len(found) != 1 || found[0].Reference != good.String() || found[0].TxHash != sig.String() || found[0].Block != 42 {
		t.Fatalf("found %+v", found)
	}
	if err == nil || !strings.Contains(err.Error(), "1 of 2 references not searched") || !strings.Contains(err.Error(), bad.String()) {
		t.Fatalf("error %v", err)
	}
	if node.asked != 2 {
		t.Fatalf("%d keys asked, want 2", node.asked)
	}
	// Every key answered: no error.
	node.broken = nil
	if _, err := v.findReferences(context.Background(), []string{bad.String(), good.String()}); err != nil {
		t.Fatal(err)
	}
}

// Every successful transaction carrying a reference is found, oldest
// first, failed ones left out: a stranger's transfer with the session's
// key mined before the customer's must not hide the customer's.
func TestFindReferencesReturnsEverySuccessfulTransfer(t *testing.T) {
	ref := solana.NewWallet().PublicKey()
	var stranger, failed, customer solana.Signature
	stranger[0], failed[0], customer[0] = 1, 2, 3
	node := &signatureNode{sigs: map[solana.PublicKey][]*rpc.TransactionSignature{ref: {
		// Newest first, as the node answers.
		{Signature: customer, Slot: 30},
		{Signature: failed, Slot: 20, Err: map[string]any{"InstructionError": []any{0, "Custom"}}},
		{Signature: stranger, Slot: 10},
	}}}
	v, err := NewSolanaVerifier(Network{Name: NetworkSolanaDevnet, Family: FamilySolana, USDC: solana.NewWallet().PublicKey().String()}, node)
	if err != nil {
		t.Fatal(err)
	}
	found, err := v.findReferences(context.Background(), []string{ref.String()})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 2 || found[0].TxHash != stranger.String() || found[1].TxHash != customer.String() {
		t.Fatalf("found %+v", found)
	}
}

// A stored cursor more than a few blocks past the node's head (a dev chain
// started afresh after a run of ten minutes, a node of another chain)
// starts the scan again at the recent blocks; one a block or two ahead (a
// lagging node) waits for the node.
func TestResumeFrom(t *testing.T) {
	for _, c := range []struct{ from, head, want uint64 }{{0, 10, 0}, {9, 10, 9}, {11, 10, 11}, {20, 10, 20}, {21, 10, 0}, {600, 10, 0}} {
		if got := resumeFrom(c.from, c.head); got != c.want {
			t.Errorf("resumeFrom(%d, %d) = %d, want %d", c.from, c.head, got, c.want)
		}
	}
}
