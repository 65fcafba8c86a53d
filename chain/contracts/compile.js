// Compiles src/*.sol with solc-js into artifacts/<Contract>.json ({abi, bytecode}).
//
//   npm install --prefix /tmp/solc solc@0.8.28
//   SOLC_DIR=/tmp/solc node chain/contracts/compile.js
//
// The artifacts are committed and embedded in Go (contracts.go), so building
// and testing paygate never needs node or solc.
'use strict';
const crypto = require('crypto');
const fs = require('fs');
const path = require('path');

const solcDir = process.env.SOLC_DIR || '/tmp/solc';
const solc = require(require.resolve('solc', { paths: [solcDir, path.join(solcDir, 'node_modules')] }));

const srcDir = path.join(__dirname, 'src');
const outDir = path.join(__dirname, 'artifacts');

const sources = {};
for (const f of fs.readdirSync(srcDir).filter((f) => f.endsWith('.sol')).sort()) {
  sources[f] = { content: fs.readFileSync(path.join(srcDir, f), 'utf8') };
}

// One digest of every source (name, byte length, content, in name order),
// stamped on every artifact: contracts_test.go recomputes it from src/ and
// fails when a source changed without a recompile. Every artifact carries the
// digest of all sources because a contract may import another file.
const digest = crypto.createHash('sha256');
for (const f of Object.keys(sources).sort()) {
  const content = Buffer.from(sources[f].content, 'utf8');
  digest.update(f + '\n' + content.length + '\n');
  digest.update(content);
}
const sourcesSha256 = digest.digest('hex');

const input = {
  language: 'Solidity',
  sources,
  settings: {
    // cancun runs on every supported chain and on go-ethereum's simulated backend.
    evmVersion: 'cancun',
    optimizer: { enabled: true, runs: 200 },
    // No metadata hash, so that recompiling the same sources reproduces the
    // committed artifacts byte for byte.
    metadata: { bytecodeHash: 'none' },
    outputSelection: { '*': { '*': ['abi', 'evm.bytecode.object'] } },
  },
};

const output = JSON.parse(solc.compile(JSON.stringify(input)));
let failed = false;
for (const e of output.errors || []) {
  console.error(e.formattedMessage);
  if (e.severity === 'error') failed = true;
}
if (failed) process.exit(1);

fs.mkdirSync(outDir, { recursive: true });
for (const file of Object.keys(output.contracts).sort()) {
  for (const [name, c] of Object.entries(output.contracts[file])) {
    if (c.evm.bytecode.object === '') continue; // interfaces
    const artifact = {
      contractName: name,
      sourceName: file,
      compiler: 'solc-js ' + solc.version(),
      sourcesSha256,
      abi: c.abi,
      bytecode: '0x' + c.evm.bytecode.object,
    };
    fs.writeFileSync(path.join(outDir, name + '.json'), JSON.stringify(artifact, null, 2) + '\n');
    console.log('wrote', path.join('artifacts', name + '.json'));
  }
}
