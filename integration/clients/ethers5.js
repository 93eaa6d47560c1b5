'use strict';
// ethers 5 through an endpoint (muxd, or geth for a baseline); run by
// clients_test.go. Prints a JSON summary; exit 0 only if every check passed.
//
//   node ethers5.js --http URL   JsonRpcBatchProvider: bursts of concurrent
//                                calls, which it sends as one batch and
//                                pairs with the answer array BY POSITION
//   node ethers5.js --ws URL     WebSocketProvider basics: network, block
//                                number, newHeads, concurrent calls
//
// Both may be given. The denied method (admin_peers by default) must fail
// with -32601 as geth's own "method not available" does; geth --dev without
// the admin API answers it the same way, so the baseline holds too.

const { ethers } = require('ethers');
const { parseArgs, run, errInfo, hexQuantity } = require('./lib');

const usage =
  'usage: node ethers5.js [--http URL] [--ws URL] [--chain-id 1337] [--bursts 20] [--denied admin_peers]';
const args = parseArgs(
  process.argv.slice(2),
  { http: '', ws: '', 'chain-id': '1337', bursts: '20', denied: 'admin_peers' },
  usage,
);
const chainId = Number(args['chain-id']);
const chainHex = '0x' + chainId.toString(16);

// settle waits for every promise of an object of promises and returns, by
// the same keys, {ok: true, value} or {ok: false, error}.
async function settle(calls) {
  const keys = Object.keys(calls);
  const out = await Promise.allSettled(keys.map((k) => calls[k]));
  const res = {};
  keys.forEach((k, i) => {
    res[k] = out[i].status === 'fulfilled' ? { ok: true, value: out[i].value } : { ok: false, error: errInfo(out[i].reason) };
  });
  return res;
}

// checkDenied: the denied method's call failed with geth's -32601.
function checkDenied(c, where, r) {
  c.ok(
    !r.ok && r.error.code === -32601 && /does not exist\/is not available/.test(r.error.message || ''),
    `${where}: ${args.denied} fails with -32601 "does not exist/is not available"`,
    r,
  );
}

// checkBlock: r is a block number (a number, or a quantity string when raw)
// within [lo, hi], the chain's head just before and just after the call.
function checkBlock(c, where, r, lo, hi, raw) {
  const n = r.ok ? (raw ? hexQuantity(r.value) : r.value) : NaN;
  c.ok(r.ok && Number.isInteger(n) && n >= lo && n <= hi, `${where}: block number within [${lo}, ${hi}]`, r);
}

async function batchOverHTTP(c, url) {
  // The reference for the head: a plain provider, one call per POST, so no
  // batch and nothing to pair by position.
  const ref = new ethers.providers.StaticJsonRpcProvider(url, chainId);
  const head = async () => hexQuantity(await ref.send('eth_blockNumber', []));

  const p = new ethers.providers.JsonRpcBatchProvider(url);
  // Every batch's request ids and answer ids, as ethers saw them: an answer
  // array out of request order is what breaks ethers' pairing by position.
  let batches = 0;
  let outOfOrder = 0;
  p.on('debug', (ev) => {
    if (ev.action !== 'response' || !Array.isArray(ev.request) || ev.error) return;
    batches++;
    const want = ev.request.map((r) => r.id);
    const got = Array.isArray(ev.response) ? ev.response.map((r) => r && r.id) : ev.response;
    if (JSON.stringify(got) !== JSON.stringify(want)) {
      outOfOrder++;
      c.fail('http batch: answers in request order', { request: want, response: got });
    }
  });

  // The first call detects the network (eth_chainId); after it muxd has
  // eth_chainId cached, and answers it itself inside the batches below.
  const net = await settle({ network: p.getNetwork() });
  c.ok(net.network.ok && net.network.value.chainId === chainId, `http: getNetwork().chainId = ${chainId}`, net.network);

  const bursts = Number(args.bursts);
  let failedBursts = 0;
  for (let i = 0; i < bursts; i++) {
    const lo = await head();
    // Issued together, so ethers puts them in one batch (it gathers what
    // is sent within 10 ms): node-answered (eth_blockNumber), answered by
    // muxd from its cache (eth_chainId, net_version) and denied by muxd.
    const r = await settle({
      blockNumber: p.send('eth_blockNumber', []),
      chainId: p.send('eth_chainId', []),
      getBlockNumber: p.getBlockNumber(),
      getNetwork: p.getNetwork(),
      netVersion: p.send('net_version', []),
      denied: p.send(args.denied, []),
    });
    const hi = await head();
    const before = c.summary.failed;
    const w = `http burst ${i}`;
    checkBlock(c, `${w} eth_blockNumber`, r.blockNumber, lo, hi, true);
    c.ok(r.chainId.ok && r.chainId.value === chainHex, `${w}: eth_chainId = ${chainHex}`, r.chainId);
    checkBlock(c, `${w} getBlockNumber()`, r.getBlockNumber, lo, hi, false);
    c.ok(
      r.getNetwork.ok && r.getNetwork.value.chainId === chainId,
      `${w}: getNetwork().chainId = ${chainId}`,
      r.getNetwork.ok ? { chainId: r.getNetwork.value.chainId } : r.getNetwork,
    );
    c.ok(r.netVersion.ok && r.netVersion.value === String(chainId), `${w}: net_version = "${chainId}"`, r.netVersion);
    checkDenied(c, w, r.denied);
    if (c.summary.failed > before) failedBursts++;
  }
  c.ok(batches > bursts, `http: ethers sent batches (${batches}) for ${bursts} bursts`);
  c.info('http', { bursts, failedBursts, batches, outOfOrder });
}

// nextBlock resolves with the number of the next block event of p, or
// rejects after ms.
function nextBlock(p, ms) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      p.off('block', on);
      reject(new Error(`no block event within ${ms} ms`));
    }, ms);
    const on = (n) => {
      clearTimeout(timer);
      p.off('block', on);
      resolve(n);
    };
    p.on('block', on);
  });
}

async function wsBasics(c, url) {
  const p = new ethers.providers.WebSocketProvider(url);
  try {
    const net = await settle({ network: p.getNetwork() });
    c.ok(net.network.ok && net.network.value.chainId === chainId, `ws: getNetwork().chainId = ${chainId}`, net.network);

    // Two consecutive heads over eth_subscribe newHeads (geth --dev mines
    // one a second); --dev never reorgs, so they are n and n+1.
    const b1 = await nextBlock(p, 20000);
    const b2 = await nextBlock(p, 20000);
    c.ok(Number.isInteger(b1) && b2 === b1 + 1, 'ws: block events consecutive', { b1, b2 });

    // Concurrent calls on one socket: each answer paired by id.
    const lo = hexQuantity(await p.send('eth_blockNumber', []));
    const r = await settle({
      blockNumber: p.send('eth_blockNumber', []),
      getBlockNumber: p.getBlockNumber(),
      chainId: p.send('eth_chainId', []),
      netVersion: p.send('net_version', []),
      denied: p.send(args.denied, []),
    });
    const hi = hexQuantity(await p.send('eth_blockNumber', []));
    checkBlock(c, 'ws eth_blockNumber', r.blockNumber, lo, hi, true);
    checkBlock(c, 'ws getBlockNumber()', r.getBlockNumber, lo, hi, false);
    c.ok(r.chainId.ok && r.chainId.value === chainHex, `ws: eth_chainId = ${chainHex}`, r.chainId);
    c.ok(r.netVersion.ok && r.netVersion.value === String(chainId), `ws: net_version = "${chainId}"`, r.netVersion);
    checkDenied(c, 'ws', r.denied);
    c.info('ws', { blocks: [b1, b2] });
  } finally {
    await p.destroy();
  }
}

run('ethers5', args, async (c) => {
  if (!args.http && !args.ws) {
    c.fail('nothing to test: give --http and/or --ws');
    return;
  }
  if (args.http) await batchOverHTTP(c, args.http);
  if (args.ws) await wsBasics(c, args.ws);
});
