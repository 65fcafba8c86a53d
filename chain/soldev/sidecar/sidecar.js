'use strict';
// paygate's Solana dev chain: a JSON-RPC HTTP server over chain.js, answering
// the methods paygate's verifier and a wallet use. See the README section
// "Solana dev chain". Usage:
//
//   node sidecar.js [--host 127.0.0.1] [--port 8899] [--slot-ms 400]
//                   [--confirm-depth 1] [--finalize-depth 8] [--watch-stdin]
//
// It prints one JSON line on stdout once it listens ({"listening": URL, ...}).
// --watch-stdin exits when stdin closes, so the process dies with its parent.

const http = require('node:http');
const chainlib = require('./chain');
const { DevChain, RPCError, GENESIS_HASH, tokenAccount, mintAccount, uiAmount, b58, unb58 } = chainlib;
const { TOKEN, TOKEN_2022, SYSTEM, ATA, MEMO, RENT_EPOCH_EXEMPT, LAMPORTS_PER_SIGNATURE } = chainlib;
const kit = require('@solana/kit');

const LITESVM_VERSION = require('litesvm/package.json').version;

// --- transaction views (json, jsonParsed, base64, base58) ---

function header(msg) {
  return {
    numRequiredSignatures: msg.header.numSignerAccounts,
    numReadonlySignedAccounts: msg.header.numReadonlySignerAccounts,
    numReadonlyUnsignedAccounts: msg.header.numReadonlyNonSignerAccounts,
  };
}

function lookups(msg) {
  return (msg.addressTableLookups || []).map((l) => ({ accountKey: l.lookupTableAddress, writableIndexes: [...l.writableIndexes], readonlyIndexes: [...l.readonlyIndexes] }));
}

const signatures = (rec) => Object.values(rec.tx.signatures).map((s) => (s ? b58.decode(s) : '1'.repeat(64)));

function compiled(ix) {
  return { programIdIndex: ix.programAddressIndex, accounts: [...(ix.accountIndices || [])], data: b58.decode(ix.data || new Uint8Array()), stackHeight: null };
}

// parseInstruction renders an instruction the way jsonParsed does for the
// programs a payment uses (SPL Token, ATA, System, Memo); others stay raw.
function parseInstruction(programId, accounts, data, stackHeight) {
  const raw = { programId, accounts, data: b58.decode(data), stackHeight };
  const d = Buffer.from(data);
  const parsed = (program, type, info) => ({ program, programId, parsed: type === null ? info : { type, info }, stackHeight });
  try {
    if (programId === TOKEN || programId === TOKEN_2022) {
      const program = programId === TOKEN ? 'spl-token' : 'spl-token-2022';
      const signers = (info, at) => {
        if (accounts.length > at + 1) return { ...info, multisigAuthority: accounts[at], signers: accounts.slice(at + 1) };
        return { ...info, authority: accounts[at] };
      };
      switch (d[0]) {
        case 3:
          return parsed(program, 'transfer', signers({ source: accounts[0], destination: accounts[1], amount: d.readBigUInt64LE(1).toString() }, 2));
        case 12:
          return parsed(program, 'transferChecked', signers({ source: accounts[0], mint: accounts[1], destination: accounts[2], tokenAmount: uiAmount(d.readBigUInt64LE(1), d[9]) }, 3));
        case 7:
          return parsed(program, 'mintTo', signers({ mint: accounts[0], account: accounts[1], amount: d.readBigUInt64LE(1).toString() }, 2));
        case 14:
          return parsed(program, 'mintToChecked', signers({ mint: accounts[0], account: accounts[1], tokenAmount: uiAmount(d.readBigUInt64LE(1), d[9]) }, 2));
        case 18:
          return parsed(program, 'initializeAccount3', { account: accounts[0], mint: accounts[1], owner: b58.decode(d.subarray(1, 33)) });
        case 21:
          return parsed(program, 'getAccountDataSize', { mint: accounts[0] });
        case 22:
          return parsed(program, 'initializeImmutableOwner', { account: accounts[0] });
      }
    } else if (programId === ATA && (d.length === 0 || d[0] <= 1)) {
      const info = { source: accounts[0], account: accounts[1], wallet: accounts[2], mint: accounts[3], systemProgram: accounts[4], tokenProgram: accounts[5] };
      return parsed('spl-associated-token-account', d.length === 0 || d[0] === 0 ? 'create' : 'createIdempotent', info);
    } else if (programId === SYSTEM && d.length >= 4) {
      switch (d.readUInt32LE(0)) {
        case 0:
          return parsed('system', 'createAccount', { source: accounts[0], newAccount: accounts[1], lamports: Number(d.readBigUInt64LE(4)), space: Number(d.readBigUInt64LE(12)), owner: b58.decode(d.subarray(20, 52)) });
        case 2:
          return parsed('system', 'transfer', { source: accounts[0], destination: accounts[1], lamports: Number(d.readBigUInt64LE(4)) });
      }
    } else if (programId === MEMO) {
      return parsed('spl-memo', null, d.toString('utf8'));
    }
  } catch {
    // malformed data: fall through to the raw form
  }
  return raw;
}

function transactionView(rec, encoding) {
  switch (encoding) {
    case 'base64':
      return [Buffer.from(rec.bytes).toString('base64'), 'base64'];
    case 'base58':
      return [b58.decode(rec.bytes), 'base58'];
    case 'json': {
      const message = { header: header(rec.msg), accountKeys: [...rec.msg.staticAccounts], recentBlockhash: rec.msg.lifetimeToken, instructions: rec.msg.instructions.map(compiled) };
      if (rec.msg.version !== 'legacy') message.addressTableLookups = lookups(rec.msg);
      return { signatures: signatures(rec), message };
    }
    case 'jsonParsed': {
      const keyOf = (i) => rec.keys[i].pubkey;
      const instructions = rec.msg.instructions.map((ix) =>
        parseInstruction(keyOf(ix.programAddressIndex), [...(ix.accountIndices || [])].map(keyOf), ix.data || new Uint8Array(), null));
      const message = { accountKeys: rec.keys.map((k) => ({ ...k })), recentBlockhash: rec.msg.lifetimeToken, instructions };
      if (rec.msg.version !== 'legacy') message.addressTableLookups = lookups(rec.msg);
      return { signatures: signatures(rec), message };
    }
    default:
      throw new RPCError(-32602, `Invalid params: unknown encoding ${encoding}`);
  }
}

function metaView(rec, encoding) {
  const meta = { ...rec.meta };
  if (encoding === 'jsonParsed') {
    const keyOf = (i) => rec.keys[i].pubkey;
    meta.innerInstructions = meta.innerInstructions.map(({ index, instructions }) => ({
      index,
      instructions: instructions.map((ii) => parseInstruction(keyOf(ii.programIdIndex), ii.accounts.map(keyOf), unb58.encode(ii.data), ii.stackHeight)),
    }));
    delete meta.loadedAddresses; // jsonParsed marks them in accountKeys (source: lookupTable)
  }
  return meta;
}

// --- accounts ---

// The default encoding, binary, is a bare base58 string (legacy), as in Agave.
function accountView(acct, encoding = 'binary', dataSlice) {
  if (!acct.exists) return null;
  let data = Buffer.from(acct.data);
  const value = { lamports: acct.lamports, owner: acct.programAddress, executable: acct.executable, rentEpoch: RENT_EPOCH_EXEMPT, space: data.length };
  if (dataSlice) data = data.subarray(dataSlice.offset, dataSlice.offset + dataSlice.length);
  switch (encoding) {
    case 'base58':
    case 'binary':
      if (data.length > 128) throw new RPCError(-32600, 'Encoded binary (base 58) data should be less than 128 bytes, please use Base64 encoding.');
      value.data = encoding === 'binary' ? b58.decode(data) : [b58.decode(data), 'base58'];
      break;
    case 'base64':
      value.data = [data.toString('base64'), 'base64'];
      break;
    case 'jsonParsed': {
      const program = acct.programAddress === TOKEN ? 'spl-token' : 'spl-token-2022';
      const t = tokenAccount(acct);
      const m = mintAccount(acct);
      if (t) {
        const mint = mintAccount(chain.account(t.mint));
        const info = { isNative: false, mint: t.mint, owner: t.owner, state: t.state === 2 ? 'frozen' : 'initialized', tokenAmount: uiAmount(t.amount, mint ? mint.decimals : 0) };
        value.data = { program, parsed: { type: 'account', info }, space: acct.data.length };
      } else if (m) {
        const info = { decimals: m.decimals, freezeAuthority: m.freezeAuthority, isInitialized: true, mintAuthority: m.mintAuthority, supply: m.supply.toString() };
        value.data = { program, parsed: { type: 'mint', info }, space: acct.data.length };
      } else {
        value.data = [data.toString('base64'), 'base64'];
      }
      break;
    }
    default:
      throw new RPCError(-32602, `Invalid params: unsupported encoding ${encoding}`);
  }
  return value;
}

// --- JSON-RPC methods ---

const ctx = (slot) => ({ slot, apiVersion: '2.2.0' });
const addressParam = (a) => {
  try {
    kit.assertIsAddress(a);
    return a;
  } catch {
    throw new RPCError(-32602, `Invalid param: ${JSON.stringify(a)} is not a valid public key`);
  }
};
const atLeastConfirmed = (c = 'finalized') => {
  if (c === 'processed') throw new RPCError(-32602, 'Method does not support commitment below `confirmed`');
  return c;
};
const decodeWire = (s, encoding = 'base58') => {
  if (typeof s !== 'string') throw new RPCError(-32602, 'Invalid params: expected an encoded transaction string');
  if (encoding === 'base64') return new Uint8Array(Buffer.from(s, 'base64'));
  if (encoding === 'base58') return new Uint8Array(unb58.encode(s));
  throw new RPCError(-32602, `Invalid params: unsupported encoding ${encoding}`);
};

let chain;

const methods = {
  getHealth: () => 'ok',
  getVersion: () => ({ 'solana-core': `litesvm-${LITESVM_VERSION}`, 'feature-set': 0 }),
  getGenesisHash: () => GENESIS_HASH,
  getSlot: (o = {}) => chain.slotAt(o.commitment),
  getBlockHeight: (o = {}) => chain.slotAt(o.commitment),
  getMinimumBalanceForRentExemption: (len = 0) => chain.svm.minimumBalanceForRentExemption(BigInt(len)),
  getLatestBlockhash: (o = {}) => {
    const { slot, blockhash, lastValidBlockHeight } = chain.latestBlockhash(o.commitment);
    return { context: ctx(slot), value: { blockhash, lastValidBlockHeight } };
  },
  isBlockhashValid: (bh, o = {}) => ({ context: ctx(chain.slotAt(o.commitment)), value: chain.blockhashValid(bh) }),
  getFeeForMessage: (m, o = {}) => {
    const msg = kit.getCompiledTransactionMessageDecoder().decode(Buffer.from(m, 'base64'));
    return { context: ctx(chain.slotAt(o.commitment)), value: LAMPORTS_PER_SIGNATURE * BigInt(msg.header.numSignerAccounts) };
  },
  getBalance: (a, o = {}) => {
    const acct = chain.account(addressParam(a));
    return { context: ctx(chain.slotAt(o.commitment)), value: acct.exists ? acct.lamports : 0n };
  },
  getAccountInfo: (a, o = {}) => ({ context: ctx(chain.slotAt(o.commitment)), value: accountView(chain.account(addressParam(a)), o.encoding, o.dataSlice) }),
  getMultipleAccounts: (list, o = {}) => ({ context: ctx(chain.slotAt(o.commitment)), value: list.map((a) => accountView(chain.account(addressParam(a)), o.encoding, o.dataSlice)) }),
  getTokenAccountBalance: (a, o = {}) => {
    const acct = chain.account(addressParam(a));
    if (!acct.exists) throw new RPCError(-32602, 'Invalid param: could not find account');
    const t = tokenAccount(acct);
    if (!t) throw new RPCError(-32602, 'Invalid param: not a Token account');
    const mint = mintAccount(chain.account(t.mint));
    return { context: ctx(chain.slotAt(o.commitment)), value: uiAmount(t.amount, mint ? mint.decimals : 0) };
  },
  sendTransaction: (s, o = {}) => chain.send(decodeWire(s, o.encoding), o),
  simulateTransaction: (s, o = {}) => {
    const d = chain.decode(decodeWire(s, o.encoding));
    return { context: ctx(chain.slotAt(o.commitment)), value: chain.simulate(d, o) };
  },
  getTransaction: (sig, o = {}) => {
    const opts = typeof o === 'string' ? { encoding: o } : o;
    const rec = chain.txs.get(sig);
    if (!rec || rec.slot > chain.slotAt(atLeastConfirmed(opts.commitment))) return null;
    const max = opts.maxSupportedTransactionVersion;
    const version = rec.msg.version;
    if (version !== 'legacy' && (max === undefined || max === null || version > max)) {
      throw new RPCError(-32015, `Transaction version (${version}) is not supported by the requesting client. Please try the request again with the following configuration parameter: "maxSupportedTransactionVersion": ${version}`);
    }
    const encoding = opts.encoding || 'json';
    const out = { slot: rec.slot, blockTime: rec.blockTime, meta: metaView(rec, encoding), transaction: transactionView(rec, encoding) };
    if (max !== undefined && max !== null) out.version = version;
    return out;
  },
  getSignatureStatuses: (sigs = []) => {
    if (sigs.length > 256) throw new RPCError(-32602, 'Invalid params: too many inputs provided; max 256');
    return {
      context: ctx(chain.slot),
      value: sigs.map((s) => {
        const rec = chain.txs.get(s);
        if (!rec) return null;
        const confirmationStatus = chain.statusOf(rec.slot);
        return {
          slot: rec.slot,
          confirmations: confirmationStatus === 'finalized' ? null : Number(chain.slot - rec.slot),
          err: rec.meta.err,
          status: rec.meta.status,
          confirmationStatus,
        };
      }),
    };
  },
  getSignaturesForAddress: (a, o = {}) => {
    const visible = chain.slotAt(atLeastConfirmed(o.commitment));
    const limit = o.limit === undefined || o.limit === null ? 1000 : o.limit;
    if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new RPCError(-32602, 'Invalid limit; max 1000');
    const list = (chain.byAddress.get(addressParam(a)) || []).slice().reverse();
    let start = 0;
    if (o.before) {
      const i = list.indexOf(o.before);
      start = i < 0 ? list.length : i + 1;
    }
    const out = [];
    for (const sig of list.slice(start)) {
      if (sig === o.until || out.length >= limit) break;
      const rec = chain.txs.get(sig);
      if (rec.slot > visible) continue;
      const memo = rec.msg.instructions
        .filter((ix) => rec.keys[ix.programAddressIndex].pubkey === MEMO)
        .map((ix) => `[${(ix.data || []).length}] ${Buffer.from(ix.data || []).toString('utf8')}`);
      out.push({ signature: sig, slot: rec.slot, err: rec.meta.err, memo: memo.length ? memo.join('; ') : null, blockTime: rec.blockTime, confirmationStatus: chain.statusOf(rec.slot) });
    }
    return out;
  },
};

// --- HTTP ---

// stringify writes BigInt values as JSON numbers (u64 slots and lamports).
function stringify(v) {
  return JSON.stringify(v, (_, x) => (typeof x === 'bigint' ? `@@big:${x}@@` : x)).replace(/"@@big:(\d+)@@"/g, '$1');
}

function call(req) {
  const id = req && req.id !== undefined ? req.id : null;
  if (!req || req.jsonrpc !== '2.0' || typeof req.method !== 'string') {
    return { jsonrpc: '2.0', id, error: { code: -32600, message: 'Invalid request' } };
  }
  const fn = methods[req.method];
  if (!fn) return { jsonrpc: '2.0', id, error: { code: -32601, message: 'Method not found' } };
  try {
    const params = req.params === undefined ? [] : req.params;
    if (!Array.isArray(params)) throw new RPCError(-32602, 'Invalid params: expected an array');
    return { jsonrpc: '2.0', id, result: fn(...params) };
  } catch (e) {
    if (e instanceof RPCError) return { jsonrpc: '2.0', id, error: { code: e.code, message: e.message, data: e.data } };
    process.stderr.write(`soldev: ${req.method}: ${e.stack}\n`);
    return { jsonrpc: '2.0', id, error: { code: -32603, message: `Internal error: ${e.message}` } };
  }
}

function serve(req, res) {
  res.setHeader('Access-Control-Allow-Origin', '*'); // a browser wallet on the checkout page
  res.setHeader('Access-Control-Allow-Headers', 'Content-Type, solana-client');
  res.setHeader('Access-Control-Allow-Methods', 'POST, GET, OPTIONS');
  if (req.method === 'OPTIONS') return res.writeHead(204).end();
  if (req.method === 'GET' && req.url === '/health') return res.writeHead(200, { 'Content-Type': 'text/plain' }).end('ok');
  if (req.method !== 'POST') return res.writeHead(405).end();
  let body = '';
  req.setEncoding('utf8');
  req.on('data', (c) => {
    body += c;
    if (body.length > 4 << 20) req.destroy();
  });
  req.on('end', () => {
    let out;
    try {
      const parsed = JSON.parse(body);
      out = Array.isArray(parsed) ? parsed.map(call) : call(parsed);
    } catch {
      out = { jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } };
    }
    res.writeHead(200, { 'Content-Type': 'application/json' }).end(stringify(out));
  });
}

function parseArgs(argv) {
  const o = { host: '127.0.0.1', port: 8899, 'slot-ms': 400, 'confirm-depth': 1, 'finalize-depth': 8, 'watch-stdin': false };
  for (let i = 0; i < argv.length; i++) {
    const [k, v] = argv[i].replace(/^--/, '').split('=');
    if (!(k in o)) throw new Error(`unknown flag --${k}`);
    if (typeof o[k] === 'boolean') o[k] = true;
    else o[k] = typeof o[k] === 'number' ? Number(v !== undefined ? v : argv[++i]) : v !== undefined ? v : argv[++i];
  }
  return o;
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  chain = new DevChain({ slotMs: o['slot-ms'], confirmDepth: o['confirm-depth'], finalizeDepth: o['finalize-depth'] });
  const keys = await chain.genesis();
  chain.start();
  const server = http.createServer(serve);
  server.on('error', (e) => {
    process.stderr.write(`soldev: ${e.message}\n`);
    process.exit(1);
  });
  server.listen(o.port, o.host, () => {
    const { address, port } = server.address();
    const url = `http://${address.includes(':') ? `[${address}]` : address}:${port}`;
    process.stdout.write(stringify({ listening: url, genesisHash: GENESIS_HASH, litesvm: LITESVM_VERSION, ...keys }) + '\n');
  });
  const stop = () => {
    chain.stop();
    server.close();
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  if (o['watch-stdin']) {
    process.stdin.on('end', stop);
    process.stdin.on('close', stop);
    process.stdin.resume();
  }
}

main().catch((e) => {
  process.stderr.write(`soldev: ${e.stack}\n`);
  process.exit(1);
});
