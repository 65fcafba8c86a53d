package chain

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

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

// walletNode is one wallet's USDC account history: its signatures, newest
// first (paged as a node pages them: Before, Until, Limit), and each
// transaction's USDC balances by owner, before and after; failing makes
// getTransaction fail for a signature.
type walletNode struct {
	mint    solana.PublicKey
	sigs    []*rpc.TransactionSignature
	moves   map[solana.Signature]map[solana.PublicKey][2]uint64
	failing map[solana.Signature]bool
	lists   int
	// afterGet runs after each getTransaction (a pass running out of time).
	afterGet func()
}

func (n *walletNode) GetSignaturesForAddressWithOpts(_ context.Context, _ solana.PublicKey, o *rpc.GetSignaturesForAddressOpts) ([]*rpc.TransactionSignature, error) {
	n.lists++
	var out []*rpc.TransactionSignature
	started := o.Before.IsZero()
	for _, s := range n.sigs {
		if !started {
			started = s.Signature == o.Before
			continue
		}
		if s.Signature == o.Until || (o.Limit != nil && len(out) == *o.Limit) {
			break
		}
		out = append(out, s)
	}
	return out, nil
}

func (n *walletNode) GetTransaction(ctx context.Context, sig solana.Signature, _ *rpc.GetTransactionOpts) (*rpc.GetTransactionResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if n.afterGet != nil {
		defer n.afterGet()
	}
	if n.failing[sig] {
		return nil, errors.New("rpc: 429 too many requests")
	}
	meta := &rpc.TransactionMeta{}
	for owner, b := range n.moves[sig] {
		for i, amount := range b {
			tb := rpc.TokenBalance{Mint: n.mint, Owner: &owner, ProgramId: &solana.TokenProgramID,
				UiTokenAmount: &rpc.UiTokenAmount{Amount: strconv.FormatUint(amount, 10)}}
			if i == 0 {
				meta.PreTokenBalances = append(meta.PreTokenBalances, tb)
			} else {
				meta.PostTokenBalances = append(meta.PostTokenBalances, tb)
			}
		}
	}
	return &rpc.GetTransactionResult{Meta: meta}, nil
}

// The transfers out of a Solana wallet are what its other owners gained
// while its USDC fell, transaction by transaction, oldest first; a payment
// into it is none. A transaction the node fails on keeps what was read
// before it and the wallet's place after that: the next read goes on from
// there, and reads nothing twice.
func TestFindTransfersFromSolana(t *testing.T) {
	wallet, payer, third := solana.NewWallet().PublicKey(), solana.NewWallet().PublicKey(), solana.NewWallet().PublicKey()
	sig := func(b byte) solana.Signature { var s solana.Signature; s[0] = b; return s }
	s1, s2, s3, s4 := sig(1), sig(2), sig(3), sig(4)
	node := &walletNode{mint: solana.NewWallet().PublicKey(),
		sigs: []*rpc.TransactionSignature{{Signature: s4, Slot: 40}, {Signature: s3, Slot: 30}, {Signature: s2, Slot: 20}, {Signature: s1, Slot: 10}},
		moves: map[solana.Signature]map[solana.PublicKey][2]uint64{
			s1: {wallet: {100, 95}, payer: {0, 3}, third: {10, 12}}, // two transfers out
			s2: {wallet: {95, 102}, payer: {3, 0}},                  // a payment in
			s3: {wallet: {102, 101}, payer: {0, 1}},
			s4: {wallet: {101, 96}, payer: {1, 6}},
		},
		failing: map[solana.Signature]bool{s3: true},
	}
	v, err := NewSolanaVerifier(Network{Name: NetworkSolanaDevnet, Family: FamilySolana, USDC: node.mint.String()}, node)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	read := func(after map[string]string) ([]Incoming, map[string]string, error) {
		return eachWalletTransaction(ctx, v, []string{wallet.String()}, after, time.Time{}, v.outgoing)
	}
	describe := func(in []Incoming) string {
		var s []string
		for _, i := range in {
			s = append(s, fmt.Sprintf("%d:%s>%s:%s", i.Block, i.From[:4], i.To[:4], i.Units))
		}
		return strings.Join(s, " ")
	}
	w, p, q := wallet.String()[:4], payer.String()[:4], third.String()[:4]
	want := []string{"10:" + w + ">" + p + ":3", "10:" + w + ">" + q + ":2"}
	if q < p {
		want[0], want[1] = want[1], want[0]
	}
	got, newest, err := read(nil)
	if err == nil || describe(got) != strings.Join(want, " ") || newest[wallet.String()] != s2.String() {
		t.Fatalf("first read: %s, place %s, err %v", describe(got), newest[wallet.String()], err)
	}
	node.failing = nil
	got, newest, err = read(newest)
	if err != nil || describe(got) != "30:"+w+">"+p+":1 40:"+w+">"+p+":5" || newest[wallet.String()] != s4.String() {
		t.Fatalf("second read: %s, place %s, err %v", describe(got), newest[wallet.String()], err)
	}
	if got, newest, err = read(newest); err != nil || len(got) != 0 || newest[wallet.String()] != s4.String() {
		t.Fatalf("nothing new: %s, place %s, err %v", describe(got), newest[wallet.String()], err)
	}
	// A pass running out of time after the first transaction keeps it and
	// the place after it.
	var cancel context.CancelFunc
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	node.afterGet = cancel
	got, newest, err = read(nil)
	if err == nil || describe(got) != strings.Join(want, " ") || newest[wallet.String()] != s1.String() {
		t.Fatalf("out of time: %s, place %s, err %v", describe(got), newest[wallet.String()], err)
	}
}

// floodedNode is a wallet's USDC account with n signatures, one a second
// back from now, newest first; signature i+1 is the (i+1)th newest.
func floodedNode(n int, now time.Time) *walletNode {
	node := &walletNode{}
	for i := range n {
		var s solana.Signature
		binary.BigEndian.PutUint32(s[:], uint32(i+1))
		bt := solana.UnixTimeSeconds(now.Add(-time.Duration(i) * time.Second).Unix())
		node.sigs = append(node.sigs, &rpc.TransactionSignature{Signature: s, BlockTime: &bt})
	}
	return node
}

// A wallet read back to a time pages through its signatures to it, one
// read from its place pages back to that place, one below a signature from
// there; without any of them, one page. A listing longer than
// solanaListPages pages answers none and where the next pass goes on.
func TestWalletSignaturesPageBackToSince(t *testing.T) {
	now := time.Now()
	node := floodedNode(2_500, now)
	account := solana.NewWallet().PublicKey()
	at := func(i int) string { return node.sigs[i].Signature.String() }
	for _, c := range []struct {
		from, below string
		since       time.Time
		want, lists int
	}{
		{"", "", time.Time{}, solanaSignaturesPerReference, 1},
		{"", "", now.Add(-time.Hour), 2_500, 3},
		{"", "", now.Add(-1_500 * time.Second), 2_000, 2}, // the page that reaches since is the last
		{at(2_400), "", time.Time{}, 2_400, 3},
		{at(2_000), "", time.Time{}, 2_000, 3}, // a full page ends short of the place: one more asked
		{at(2_400), "", now.Add(-1_500 * time.Second), 2_000, 2},
		{at(2_400), at(999), time.Time{}, 1_400, 2},
		{"", at(999), now.Add(-time.Hour), 1_500, 2},
	} {
		node.lists = 0
		sigs, lower, err := walletSignatures(context.Background(), node, account, c.from, c.below, c.since)
		if err != nil || lower != "" || len(sigs) != c.want || node.lists != c.lists {
			t.Fatalf("from %.8s below %.8s since %v: %d signatures in %d pages, lower %q (%v), want %d in %d",
				c.from, c.below, c.since, len(sigs), node.lists, lower, err, c.want, c.lists)
		}
	}
	// A page whose last signature has no block time does not end the
	// listing back to since: the next page is asked.
	bt := node.sigs[999].BlockTime
	node.sigs[999].BlockTime = nil
	for from, want := range map[string]int{at(2_400): 2_400, "": 2_500} {
		node.lists = 0
		if sigs, _, err := walletSignatures(context.Background(), node, account, from, "", now.Add(-time.Hour)); err != nil ||
			len(sigs) != want || node.lists != 3 {
			t.Fatalf("from %.8s: a signature without a block time ends a page: %d signatures in %d pages (%v)", from, len(sigs), node.lists, err)
		}
	}
	node.sigs[999].BlockTime = bt
	big := floodedNode(solanaListPages*solanaSignaturesPerReference+10, now)
	big.lists = 0
	sigs, lower, err := walletSignatures(context.Background(), big, account, big.sigs[len(big.sigs)-1].Signature.String(), "", time.Time{})
	if err != nil || len(sigs) != 0 || lower != big.sigs[solanaListPages*solanaSignaturesPerReference-1].Signature.String() || big.lists != solanaListPages {
		t.Fatalf("past the bound: %d signatures in %d pages, lower %.8s (%v)", len(sigs), big.lists, lower, err)
	}
}

// A wallet flooded with more new transactions between two passes than a
// pass reads or lists (a stranger's dust transfers around a customer's
// payment, or a week read back after a restart) is listed down over the
// next passes, then read oldest first, solanaReadsPerPass a pass, from its
// place: every transaction is read once, none skipped, in order, and every
// pass makes at most solanaListPages listing calls.
func TestWalletReadOnAfterAFlood(t *testing.T) {
	for _, c := range []struct {
		name  string
		fresh int // new signatures after the place
		since bool
	}{
		{"2,599 new", 2_599, false},
		{"exactly a pass's listing", solanaListPages * solanaSignaturesPerReference, false},
		{"a pass's listing and one", solanaListPages*solanaSignaturesPerReference + 1, false},
		{"more than two passes list", 2*solanaListPages*solanaSignaturesPerReference + 2_345, false},
		{"read back to since, no place", 2*solanaListPages*solanaSignaturesPerReference + 17, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := time.Now()
			node := floodedNode(c.fresh+1, now)
			v, err := NewSolanaVerifier(Network{Name: NetworkSolanaDevnet, Family: FamilySolana, USDC: solana.NewWallet().PublicKey().String()}, node)
			if err != nil {
				t.Fatal(err)
			}
			wallet := solana.NewWallet().PublicKey().String()
			// The place: the oldest signature, read on an earlier pass; or
			// none, reading back to just after it.
			after := map[string]string{wallet: node.sigs[c.fresh].Signature.String()}
			var since time.Time
			if c.since {
				after = nil
				since = node.sigs[c.fresh-1].BlockTime.Time() // block times are whole seconds
			}
			var read []uint32
			for pass := 1; pass <= 200 && len(read) < c.fresh; pass++ {
				node.lists = 0
				got, newest, err := eachWalletTransaction(context.Background(), v, []string{wallet}, after, since,
					func(_ solana.PublicKey, sig *rpc.TransactionSignature, _ *rpc.GetTransactionResult) []uint32 {
						return []uint32{binary.BigEndian.Uint32(sig.Signature[:4])}
					})
				if err != nil || len(got) > solanaReadsPerPass || node.lists > solanaListPages {
					t.Fatalf("pass %d: read %d in %d lists: %v", pass, len(got), node.lists, err)
				}
				read = append(read, got...)
				after = newest
			}
			if len(read) != c.fresh {
				t.Fatalf("read %d transactions in all, want %d", len(read), c.fresh)
			}
			for i, n := range read { // oldest first, the newest last
				if n != uint32(c.fresh-i) {
					t.Fatalf("transaction %d read is the %dth newest, want the %dth", i, n, c.fresh-i)
				}
			}
			if after[wallet] != node.sigs[0].Signature.String() {
				t.Fatalf("place after the flood: %s, want the newest", after[wallet])
			}
		})
	}
}
