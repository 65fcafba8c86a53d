'use strict';
// The dev chain: a LiteSVM instance (the real SBF SPL Token, Token-2022,
// Associated Token Account, Memo and Address Lookup Table programs) plus what
// LiteSVM leaves out and an RPC needs: slots that advance on a timer, a
// commitment model (confirmed and finalized trail the processed slot), one
// blockhash per slot, and a ledger of landed transactions with the meta a
// validator records (pre/post lamports and token balances, logs, inner
// instructions, loaded addresses).

const crypto = require('node:crypto');
const { LiteSVM, FailedTransactionMetadata } = require('litesvm');
const kit = require('@solana/kit');

const b58 = kit.getBase58Decoder(); // bytes -> base58 string
const unb58 = kit.getBase58Encoder(); // base58 string -> bytes
const txDecoder = kit.getTransactionDecoder();
const msgDecoder = kit.getCompiledTransactionMessageDecoder();

const SYSTEM = '11111111111111111111111111111111';
const TOKEN = 'TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA';
const TOKEN_2022 = 'TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb';
const ATA = 'ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL';
const MEMO = 'MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr';
const ALT = 'AddressLookupTab1e1111111111111111111111111';
const LAMPORTS_PER_SIGNATURE = 5000n;
const MAX_BLOCKHASH_AGE = 150n; // slots a blockhash stays valid, as on Solana
const RENT_EPOCH_EXEMPT = 18446744073709551615n;

const sha256 = (s) => crypto.createHash('sha256').update(s).digest();

// The genesis hash is fixed so that a client can tell this chain from devnet
// (soldev.GenesisHash on the Go side holds the same value).
const GENESIS_HASH = b58.decode(sha256('paygate soldev genesis'));

// devKey returns the public key of the ed25519 keypair whose 32-byte seed is
// sha256("paygate soldev " + name). These keys are public: dev use only.
const PKCS8_ED25519 = Buffer.from('302e020100300506032b657004220420', 'hex');
function devKey(name) {
  const seed = sha256('paygate soldev ' + name);
  const priv = crypto.createPrivateKey({ key: Buffer.concat([PKCS8_ED25519, seed]), format: 'der', type: 'pkcs8' });
  return b58.decode(crypto.createPublicKey(priv).export({ format: 'der', type: 'spki' }).subarray(-32));
}

async function ataOf(wallet, mint, tokenProgram) {
  const [addr] = await kit.getProgramDerivedAddress({
    programAddress: ATA,
    seeds: [kit.getAddressEncoder().encode(wallet), kit.getAddressEncoder().encode(tokenProgram), kit.getAddressEncoder().encode(mint)],
  });
  return addr;
}

// --- SPL Token account layouts (Mint: 82 bytes, Account: 165 bytes) ---

function u64le(v) {
  const b = Buffer.alloc(8);
  b.writeBigUInt64LE(BigInt(v));
  return b;
}
const pubkeyBytes = (a) => Buffer.from(unb58.encode(a));
const optionKey = (a) => (a ? Buffer.concat([Buffer.from([1, 0, 0, 0]), pubkeyBytes(a)]) : Buffer.alloc(36));

function mintData(authority, supply, decimals) {
  return Buffer.concat([optionKey(authority), u64le(supply), Buffer.from([decimals, 1]), optionKey(null)]);
}
function tokenAccountData(mint, owner, amount) {
  return Buffer.concat([pubkeyBytes(mint), pubkeyBytes(owner), u64le(amount), optionKey(null), Buffer.from([1]), Buffer.alloc(12), u64le(0), optionKey(null)]);
}

const isTokenProgram = (p) => p === TOKEN || p === TOKEN_2022;

// tokenAccount parses an initialized SPL Token or Token-2022 token account.
function tokenAccount(acct) {
  if (!acct.exists || !isTokenProgram(acct.programAddress)) return null;
  const d = Buffer.from(acct.data);
  if (d.length < 165 || (d.length > 165 && d[165] !== 2) || d[108] === 0) return null;
  return { mint: b58.decode(d.subarray(0, 32)), owner: b58.decode(d.subarray(32, 64)), amount: d.readBigUInt64LE(64), programId: acct.programAddress, state: d[108] };
}

// mintAccount parses an initialized mint of either token program.
function mintAccount(acct) {
  if (!acct.exists || !isTokenProgram(acct.programAddress)) return null;
  const d = Buffer.from(acct.data);
  if (d.length < 82 || (d.length > 82 && d[165] !== 1) || d[45] !== 1) return null;
  const opt = (off) => (d.readUInt32LE(off) === 1 ? b58.decode(d.subarray(off + 4, off + 36)) : null);
  return { mintAuthority: opt(0), supply: d.readBigUInt64LE(36), decimals: d[44], freezeAuthority: opt(46) };
}

function uiAmount(amount, decimals) {
  const s = amount.toString().padStart(decimals + 1, '0');
  let ui = decimals ? s.slice(0, -decimals) + '.' + s.slice(-decimals) : s;
  if (decimals) ui = ui.replace(/0+$/, '').replace(/\.$/, '');
  return { amount: amount.toString(), decimals, uiAmount: Number(ui), uiAmountString: ui };
}

// --- transaction errors, in the JSON shape of the Solana RPC ---

const TX_ERRORS = ['AccountInUse', 'AccountLoadedTwice', 'AccountNotFound', 'ProgramAccountNotFound', 'InsufficientFundsForFee', 'InvalidAccountForFee', 'AlreadyProcessed', 'BlockhashNotFound', 'CallChainTooDeep', 'MissingSignatureForFee', 'InvalidAccountIndex', 'SignatureFailure', 'InvalidProgramForExecution', 'SanitizeFailure', 'ClusterMaintenance', 'AccountBorrowOutstanding', 'WouldExceedMaxBlockCostLimit', 'UnsupportedVersion', 'InvalidWritableAccount', 'WouldExceedMaxAccountCostLimit', 'WouldExceedAccountDataBlockLimit', 'TooManyAccountLocks', 'AddressLookupTableNotFound', 'InvalidAddressLookupTableOwner', 'InvalidAddressLookupTableData', 'InvalidAddressLookupTableIndex', 'InvalidRentPayingAccount', 'WouldExceedMaxVoteCostLimit', 'WouldExceedAccountDataTotalLimit', 'MaxLoadedAccountsDataSizeExceeded', 'ResanitizationNeeded', 'InvalidLoadedAccountsDataSizeLimit', 'UnbalancedTransaction', 'ProgramCacheHitMaxLimit', 'CommitCancelled'];
const IX_ERRORS = ['GenericError', 'InvalidArgument', 'InvalidInstructionData', 'InvalidAccountData', 'AccountDataTooSmall', 'InsufficientFunds', 'IncorrectProgramId', 'MissingRequiredSignature', 'AccountAlreadyInitialized', 'UninitializedAccount', 'UnbalancedInstruction', 'ModifiedProgramId', 'ExternalAccountLamportSpend', 'ExternalAccountDataModified', 'ReadonlyLamportChange', 'ReadonlyDataModified', 'DuplicateAccountIndex', 'ExecutableModified', 'RentEpochModified', 'NotEnoughAccountKeys', 'AccountDataSizeChanged', 'AccountNotExecutable', 'AccountBorrowFailed', 'AccountBorrowOutstanding', 'DuplicateAccountOutOfSync', 'InvalidError', 'ExecutableDataModified', 'ExecutableLamportChange', 'ExecutableAccountNotRentExempt', 'UnsupportedProgramId', 'CallDepth', 'MissingAccount', 'ReentrancyNotAllowed', 'MaxSeedLengthExceeded', 'InvalidSeeds', 'InvalidRealloc', 'ComputationalBudgetExceeded', 'PrivilegeEscalation', 'ProgramEnvironmentSetupFailure', 'ProgramFailedToComplete', 'ProgramFailedToCompile', 'Immutable', 'IncorrectAuthority', 'AccountNotRentExempt', 'InvalidAccountOwner', 'ArithmeticOverflow', 'UnsupportedSysvar', 'IllegalOwner', 'MaxAccountsDataAllocationsExceeded', 'MaxAccountsExceeded', 'MaxInstructionTraceLengthExceeded', 'BuiltinProgramsMustConsumeComputeUnits'];

// txError converts a LiteSVM error; landed says whether a validator would
// still record the transaction in a block (execution errors: fee charged,
// effects rolled back) rather than drop it before execution.
function txError(e) {
  if (typeof e === 'number') return { json: TX_ERRORS[e] || 'SanitizeFailure', landed: false };
  if ('index' in e && typeof e.err === 'function') {
    const ie = e.err();
    let j;
    if (typeof ie === 'number') j = IX_ERRORS[ie] || 'GenericError';
    else if ('code' in ie) j = { Custom: ie.code };
    else j = { BorshIoError: ie.msg };
    return { json: { InstructionError: [e.index, j] }, landed: true };
  }
  if ('index' in e) return { json: { DuplicateInstruction: e.index }, landed: true };
  const name = e.constructor.name.replace(/^TransactionError/, '');
  return { json: { [name]: { account_index: e.accountIndex } }, landed: true };
}

function describeError(j) {
  const special = { AlreadyProcessed: 'This transaction has already been processed', AccountNotFound: 'Attempt to debit an account but found no record of a prior credit.' };
  if (typeof j === 'string') return special[j] || j[0] + j.slice(1).replace(/([a-z])([A-Z])/g, '$1 $2').toLowerCase();
  if (j.InstructionError) {
    const [i, ie] = j.InstructionError;
    const what = ie.Custom !== undefined ? 'custom program error: 0x' + ie.Custom.toString(16) : typeof ie === 'string' ? ie : JSON.stringify(ie);
    return `Error processing Instruction ${i}: ${what}`;
  }
  return JSON.stringify(j);
}

// RPCError is answered as a JSON-RPC error object.
class RPCError extends Error {
  constructor(code, message, data) {
    super(message);
    this.code = code;
    this.data = data;
  }
}

class DevChain {
  constructor({ slotMs = 400, confirmDepth = 1, finalizeDepth = 8 } = {}) {
    this.slotMs = slotMs;
    this.confirmDepth = BigInt(confirmDepth);
    this.finalizeDepth = BigInt(finalizeDepth);
    // Blockhashes are checked here, per slot, rather than by LiteSVM, which
    // knows only one current blockhash.
    this.svm = new LiteSVM().withBlockhashCheck(false).withTransactionHistory(0n);
    this.slot = 0n;
    this.blockhashes = new Map(); // blockhash -> slot
    this.slotHashes = []; // newest first, as in the SlotHashes sysvar
    this.txs = new Map(); // signature -> record
    this.order = []; // signatures in landing order
    this.byAddress = new Map(); // address -> signatures in landing order
    this.advance();
  }

  blockhashOf(slot) {
    return b58.decode(sha256(`${GENESIS_HASH}/${slot}`));
  }

  // advance starts the next slot: clock, SlotHashes sysvar (the lookup table
  // program reads it) and a new blockhash.
  advance() {
    this.slot += 1n;
    const bh = this.blockhashOf(this.slot);
    this.blockhashes.set(bh, this.slot);
    this.blockhashes.delete(this.blockhashOf(this.slot - 2n * MAX_BLOCKHASH_AGE));
    this.slotHashes.unshift({ slot: this.slot, hash: bh });
    this.slotHashes.length = Math.min(this.slotHashes.length, 150);
    this.svm.warpToSlot(this.slot);
    const clock = this.svm.getClock();
    clock.unixTimestamp = BigInt(Math.floor(Date.now() / 1000));
    this.svm.setClock(clock);
    this.svm.setSlotHashes(this.slotHashes);
  }

  start() {
    this.timer = setInterval(() => this.advance(), this.slotMs);
  }
  stop() {
    clearInterval(this.timer);
  }

  // slotAt returns the newest slot visible at a commitment.
  slotAt(commitment = 'finalized') {
    const depth = { processed: 0n, confirmed: this.confirmDepth, finalized: this.finalizeDepth }[commitment];
    if (depth === undefined) throw new RPCError(-32602, `Invalid params: unknown commitment ${commitment}`);
    return this.slot > depth ? this.slot - depth : 0n;
  }

  statusOf(slot) {
    if (slot <= this.slotAt('finalized')) return 'finalized';
    if (slot <= this.slotAt('confirmed')) return 'confirmed';
    return 'processed';
  }

  latestBlockhash(commitment) {
    const slot = this.slotAt(commitment) || 1n;
    return { slot, blockhash: this.blockhashOf(slot), lastValidBlockHeight: slot + MAX_BLOCKHASH_AGE };
  }

  blockhashValid(bh) {
    const s = this.blockhashes.get(bh);
    return s !== undefined && s + MAX_BLOCKHASH_AGE >= this.slot;
  }

  account(address) {
    return this.svm.getAccount(address);
  }

  // --- genesis ---

  // genesis creates the dev accounts directly in the account store, as a
  // validator's genesis does: the test USDC mint (6 decimals, SPL Token), a
  // Token-2022 look-alike mint, and funded customer and stranger wallets.
  async genesis() {
    const keys = {
      mintAuthority: devKey('mint authority'),
      usdcMint: devKey('usdc mint'),
      lookalikeMint: devKey('lookalike mint'),
      customer: devKey('customer'),
      stranger: devKey('stranger'),
    };
    const SOL = 1_000_000_000n;
    const usdc = 1_000_000_000_000n; // 1,000,000 USDC
    const put = (address, lamports, programAddress, data) =>
      this.svm.setAccount({ address, lamports, programAddress, executable: false, data, space: BigInt(data.length) });
    const rent = (n) => this.svm.minimumBalanceForRentExemption(BigInt(n));

    put(keys.mintAuthority, 100n * SOL, SYSTEM, new Uint8Array());
    put(keys.customer, 1000n * SOL, SYSTEM, new Uint8Array());
    put(keys.stranger, 100n * SOL, SYSTEM, new Uint8Array());
    put(keys.usdcMint, rent(82), TOKEN, mintData(keys.mintAuthority, usdc, 6));
    put(keys.lookalikeMint, rent(82), TOKEN_2022, mintData(keys.mintAuthority, usdc, 6));
    keys.customerUSDC = await ataOf(keys.customer, keys.usdcMint, TOKEN);
    keys.customerLookalike = await ataOf(keys.customer, keys.lookalikeMint, TOKEN_2022);
    keys.strangerUSDC = await ataOf(keys.stranger, keys.usdcMint, TOKEN);
    put(keys.customerUSDC, rent(165), TOKEN, tokenAccountData(keys.usdcMint, keys.customer, usdc));
    put(keys.customerLookalike, rent(165), TOKEN_2022, tokenAccountData(keys.lookalikeMint, keys.customer, usdc));
    put(keys.strangerUSDC, rent(165), TOKEN, tokenAccountData(keys.usdcMint, keys.stranger, 0n));
    this.keys = keys;
    return keys;
  }

  // --- transactions ---

  // decode parses a wire transaction and resolves its lookup tables.
  decode(bytes) {
    let tx, msg;
    try {
      tx = txDecoder.decode(bytes);
      msg = msgDecoder.decode(tx.messageBytes);
    } catch (e) {
      throw new RPCError(-32602, `invalid transaction: failed to deserialize: ${e.message}`);
    }
    const sigs = Object.values(tx.signatures);
    if (sigs.length === 0 || !sigs[0]) throw new RPCError(-32003, 'Transaction signature verification failure');
    const signature = b58.decode(sigs[0]);
    const loaded = { writable: [], readonly: [] };
    let lookupError = null;
    for (const l of msg.addressTableLookups || []) {
      const acct = this.account(l.lookupTableAddress);
      if (!acct.exists) lookupError = lookupError || 'AddressLookupTableNotFound';
      else if (acct.programAddress !== ALT) lookupError = lookupError || 'InvalidAddressLookupTableOwner';
      if (lookupError) continue;
      const d = Buffer.from(acct.data);
      const at = (i) => (56 + 32 * (i + 1) <= d.length ? b58.decode(d.subarray(56 + 32 * i, 56 + 32 * (i + 1))) : null);
      for (const [idx, list] of [[l.writableIndexes, loaded.writable], [l.readonlyIndexes, loaded.readonly]]) {
        for (const i of idx) {
          const a = at(i);
          if (a === null) lookupError = lookupError || 'InvalidAddressLookupTableIndex';
          else list.push(a);
        }
      }
    }
    const h = msg.header;
    const n = msg.staticAccounts.length;
    const keys = msg.staticAccounts.map((pubkey, i) => ({
      pubkey,
      signer: i < h.numSignerAccounts,
      writable: i < h.numSignerAccounts ? i < h.numSignerAccounts - h.numReadonlySignerAccounts : i < n - h.numReadonlyNonSignerAccounts,
      source: 'transaction',
    }));
    for (const pubkey of loaded.writable) keys.push({ pubkey, signer: false, writable: true, source: 'lookupTable' });
    for (const pubkey of loaded.readonly) keys.push({ pubkey, signer: false, writable: false, source: 'lookupTable' });
    return { tx, msg, bytes, signature, loaded, keys, lookupError };
  }

  snapshot(keys) {
    return keys.map(({ pubkey }) => {
      const a = this.account(pubkey);
      return { lamports: a.exists ? a.lamports : 0n, token: tokenAccount(a) };
    });
  }

  tokenBalances(snap) {
    const out = [];
    snap.forEach((s, accountIndex) => {
      if (!s.token) return;
      const mint = mintAccount(this.account(s.token.mint));
      const decimals = mint ? mint.decimals : 0;
      out.push({ accountIndex, mint: s.token.mint, owner: s.token.owner, programId: s.token.programId, uiTokenAmount: uiAmount(s.token.amount, decimals) });
    });
    return out;
  }

  // simulate runs a transaction without landing it; it returns the RPC
  // simulateTransaction value.
  simulate(d, { sigVerify = false, replaceRecentBlockhash = false } = {}) {
    const value = { err: null, logs: [], accounts: null, unitsConsumed: 0, returnData: null };
    if (replaceRecentBlockhash) {
      value.replacementBlockhash = { blockhash: this.blockhashOf(this.slot), lastValidBlockHeight: this.slot + MAX_BLOCKHASH_AGE };
    } else if (!this.blockhashValid(d.msg.lifetimeToken)) {
      value.err = 'BlockhashNotFound';
      return value;
    }
    if (d.lookupError) {
      value.err = d.lookupError;
      return value;
    }
    this.svm.withSigverify(sigVerify);
    let r;
    try {
      r = this.svm.simulateTransaction(d.tx);
    } catch (e) {
      value.err = 'SignatureFailure';
      return value;
    } finally {
      this.svm.withSigverify(true);
    }
    const meta = r.meta();
    if (r instanceof FailedTransactionMetadata) value.err = txError(r.err()).json;
    value.logs = meta.logs();
    value.unitsConsumed = meta.computeUnitsConsumed();
    return value;
  }

  // send executes a wire transaction. A transaction that fails before
  // execution never lands; one that fails during execution lands with
  // meta.err set and its effects rolled back, as on Solana.
  send(bytes, { skipPreflight = false } = {}) {
    const d = this.decode(bytes);
    if (this.txs.has(d.signature)) return d.signature;
    if (!skipPreflight) {
      const sim = this.simulate(d, { sigVerify: true });
      if (sim.err) {
        throw new RPCError(-32002, 'Transaction simulation failed: ' + describeError(sim.err), { ...sim, innerInstructions: null });
      }
    }
    const drop = (why) => {
      process.stderr.write(`soldev: dropped ${d.signature}: ${why}\n`);
      return d.signature;
    };
    if (!this.blockhashValid(d.msg.lifetimeToken)) return drop('BlockhashNotFound');
    if (d.lookupError) return drop(d.lookupError);
    const pre = this.snapshot(d.keys);
    const preTokenBalances = this.tokenBalances(pre);
    let r;
    try {
      r = this.svm.sendTransaction(d.tx);
    } catch (e) {
      // kit refuses a transaction with a missing signature.
      throw new RPCError(-32003, 'Transaction signature verification failure');
    }
    let err = null;
    let meta = r;
    if (r instanceof FailedTransactionMetadata) {
      const te = txError(r.err());
      if (te.json === 'SignatureFailure') throw new RPCError(-32003, 'Transaction signature verification failure');
      if (!te.landed) return drop(describeError(te.json));
      err = te.json;
      meta = r.meta();
    }
    const post = this.snapshot(d.keys);
    const fee = LAMPORTS_PER_SIGNATURE * BigInt(d.msg.header.numSignerAccounts);
    const rec = {
      ...d,
      slot: this.slot,
      blockTime: Math.floor(Date.now() / 1000),
      meta: {
        err,
        status: err === null ? { Ok: null } : { Err: err },
        fee,
        preBalances: pre.map((s) => s.lamports),
        postBalances: post.map((s) => s.lamports),
        innerInstructions: meta.innerInstructions().map((list, index) => ({
          index,
          instructions: list.map((ii) => {
            const ci = ii.instruction();
            return { programIdIndex: ci.programIdIndex(), accounts: [...ci.accounts()], data: b58.decode(ci.data()), stackHeight: ii.stackHeight() };
          }),
        })).filter((x) => x.instructions.length > 0),
        logMessages: meta.logs(),
        preTokenBalances,
        postTokenBalances: this.tokenBalances(post),
        rewards: [],
        loadedAddresses: d.loaded,
        computeUnitsConsumed: meta.computeUnitsConsumed(),
      },
    };
    this.txs.set(d.signature, rec);
    this.order.push(d.signature);
    for (const { pubkey } of d.keys) {
      if (!this.byAddress.has(pubkey)) this.byAddress.set(pubkey, []);
      const list = this.byAddress.get(pubkey);
      if (list[list.length - 1] !== d.signature) list.push(d.signature);
    }
    return d.signature;
  }
}

module.exports = {
  DevChain, RPCError, GENESIS_HASH, tokenAccount, mintAccount, uiAmount,
  SYSTEM, TOKEN, TOKEN_2022, ATA, MEMO, ALT, RENT_EPOCH_EXEMPT, LAMPORTS_PER_SIGNATURE, b58, unb58,
};
