'use strict';
// web3.js 4 BatchRequest through an endpoint (muxd, or geth for a
// baseline); run by clients_test.go. Prints a JSON summary; exit 0 only if
// every check passed.
//
//   node web3js4.js --transport ws|http|ipc --endpoint URL-or-socket-path
//
// Each try sends one batch [eth_blockNumber, eth_chainId, <denied>,
// net_version] with fresh numeric ids. eth_chainId and net_version are in
// muxd's cache by then (getChainId and a net_version call go first), so muxd
// answers them itself, and it answers the denied method itself: three
// elements muxd answers next to one the node answers. web3.js's socket
// providers (WebSocket, IPC) hand a batch answer to the batch whose FIRST
// request id equals the answer's first id, so an answer array in another
// order never reaches it (the batch times out); over HTTP the elements are
// paired by id but execute() returns the array as it came. Either way: the
// answer array must be in request order, each element with the right value.

const { Web3 } = require('web3');
const { IpcProvider } = require('web3-providers-ipc');
const { parseArgs, run, errInfo, hexQuantity } = require('./lib');

const usage =
  'usage: node web3js4.js --transport ws|http|ipc --endpoint URL-or-path [--chain-id 1337] [--tries 10] [--denied admin_peers] [--timeout-ms 5000] [--max-failed-tries 3]';
const args = parseArgs(
  process.argv.slice(2),
  {
    transport: '',
    endpoint: '',
    'chain-id': '1337',
    tries: '10',
    denied: 'admin_peers',
    'timeout-ms': '5000',
    // Tries that fail before the script stops trying: with answers out of
    // order every try over WebSocket and IPC waits out timeout-ms.
    'max-failed-tries': '3',
  },
  usage,
);
const chainId = Number(args['chain-id']);
const chainHex = '0x' + chainId.toString(16);

function provider() {
  switch (args.transport) {
    case 'ipc':
      return new IpcProvider(args.endpoint);
    case 'ws':
    case 'http':
      // Web3 picks its WebSocket or HTTP provider by the URL's scheme.
      return args.endpoint;
    default:
      process.stderr.write(`bad --transport ${JSON.stringify(args.transport)}\n${usage}\n`);
      process.exit(2);
  }
}

run(`web3js4 ${args.transport}`, args, async (c) => {
  if (!args.endpoint) {
    c.fail('nothing to test: give --endpoint');
    return;
  }
  const web3 = new Web3(provider());
  const t = args.transport;
  // One call: the head, as a raw quantity (no batch, nothing to pair by
  // position).
  const head = async () => hexQuantity(await web3.requestManager.send({ method: 'eth_blockNumber', params: [] }));
  try {
    // Single calls first: they put eth_chainId and net_version in muxd's
    // cache (and check the library works here at all).
    const got = await web3.eth.getChainId();
    c.ok(got === BigInt(chainId), `${t}: getChainId() = ${chainId}`, got);
    const nv = await web3.requestManager.send({ method: 'net_version', params: [] });
    c.ok(nv === String(chainId), `${t}: net_version = "${chainId}"`, nv);

    const tries = Number(args.tries);
    const maxFailed = Number(args['max-failed-tries']);
    let failedTries = 0;
    let done = 0;
    for (let i = 0; i < tries && failedTries < maxFailed; i++, done++) {
      const before = c.summary.failed;
      await oneBatch(c, web3, head, `${t} try ${i}`, 100 * (i + 1));
      if (c.summary.failed > before) failedTries++;
    }
    c.info(t, { tries: done, failedTries });
  } finally {
    // Close the socket so that nothing keeps the process alive (the HTTP
    // provider has none, and its disconnect() throws "not implemented").
    if (t !== 'http') {
      web3.currentProvider.disconnect();
    }
  }
});

// oneBatch sends one BatchRequest with ids base+1.. and checks the array
// execute() returns (order, ids, values) and each element's own promise.
async function oneBatch(c, web3, head, w, base) {
  const reqs = [
    { id: base + 1, method: 'eth_blockNumber' },
    { id: base + 2, method: 'eth_chainId' },
    { id: base + 3, method: args.denied },
    { id: base + 4, method: 'net_version' },
  ];
  const lo = await head();
  const batch = new web3.BatchRequest();
  // Each add() returns a promise of that element's result (rejected with
  // its error); settled here, so a rejection is data, not an unhandled one.
  const elems = reqs.map((r) =>
    batch.add({ jsonrpc: '2.0', id: r.id, method: r.method, params: [] }).then(
      (value) => ({ ok: true, value }),
      (e) => ({ ok: false, error: errInfo(e) }),
    ),
  );
  let resp;
  try {
    resp = await batch.execute({ timeout: Number(args['timeout-ms']) });
  } catch (e) {
    c.fail(`${w}: batch.execute()`, errInfo(e));
    await Promise.all(elems);
    return;
  }
  const hi = await head();
  const els = await Promise.all(elems);

  // The answer array: one answer per request, in request order.
  const wantIds = reqs.map((r) => r.id);
  const gotIds = Array.isArray(resp) ? resp.map((r) => r && r.id) : resp;
  if (!c.ok(JSON.stringify(gotIds) === JSON.stringify(wantIds), `${w}: answers in request order`, { request: wantIds, response: gotIds })) {
    return;
  }
  const [bn, cid, denied, nv] = resp;
  const n = hexQuantity(bn.result);
  c.ok(n >= lo && n <= hi, `${w}: eth_blockNumber within [${lo}, ${hi}]`, bn);
  c.ok(cid.result === chainHex, `${w}: eth_chainId = ${chainHex}`, cid);
  c.ok(
    denied.result === undefined && denied.error && denied.error.code === -32601 &&
      /does not exist\/is not available/.test(denied.error.message || ''),
    `${w}: ${args.denied} fails with -32601 "does not exist/is not available"`,
    denied,
  );
  c.ok(nv.result === String(chainId), `${w}: net_version = "${chainId}"`, nv);

  // Each element's promise got its own element's answer.
  c.ok(els[0].ok && els[0].value === bn.result, `${w}: add(eth_blockNumber) resolves with its result`, els[0]);
  c.ok(els[1].ok && els[1].value === chainHex, `${w}: add(eth_chainId) resolves with ${chainHex}`, els[1]);
  c.ok(!els[2].ok && els[2].error.code === -32601, `${w}: add(${args.denied}) rejects with -32601`, els[2]);
  c.ok(els[3].ok && els[3].value === String(chainId), `${w}: add(net_version) resolves with "${chainId}"`, els[3]);
}
