'use strict';
// Shared by the client-library scripts (ethers5.js, web3js4.js): argument
// parsing, a record of checks, and the JSON summary every script prints on
// stdout before it exits (0: every check passed; 1: one failed or the script
// broke; 2: bad usage). Progress and diagnostics go to stderr.

// parseArgs reads --name value pairs into an object, starting from
// defaults; a name not in defaults is a usage error, so a typo in the Go
// test cannot silently drop a transport.
function parseArgs(argv, defaults, usage) {
  const out = { ...defaults };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const name = a.startsWith('--') ? a.slice(2) : null;
    if (name === null || !(name in defaults) || i + 1 >= argv.length) {
      process.stderr.write(`bad argument ${JSON.stringify(a)}\n${usage}\n`);
      process.exit(2);
    }
    out[name] = argv[++i];
  }
  return out;
}

// Checks collects the outcome of each assertion; the summary lists them
// all, the failures in full.
class Checks {
  constructor(script, args) {
    this.summary = { script, args, passed: 0, failed: 0, failures: [], info: {} };
  }

  // ok records a check: cond true passes; otherwise what (and detail, any
  // JSON-able value showing what was seen) goes into the failures.
  ok(cond, what, detail) {
    if (cond) {
      this.summary.passed++;
      return true;
    }
    this.summary.failed++;
    if (this.summary.failures.length < 20) {
      this.summary.failures.push(detail === undefined ? { what } : { what, detail });
    }
    process.stderr.write(`FAIL ${what}${detail === undefined ? '' : ' ' + safeJSON(detail)}\n`);
    return false;
  }

  fail(what, detail) {
    return this.ok(false, what, detail);
  }

  // info keeps a value for the summary (what was exercised, counts).
  info(key, value) {
    this.summary.info[key] = value;
  }

  // finish prints the summary and exits: 1 if any check failed or none
  // was made (a script that checked nothing has not tested anything).
  finish() {
    if (this.summary.passed + this.summary.failed === 0) {
      this.fail('no checks were made');
    }
    process.stdout.write(safeJSON(this.summary, 2) + '\n');
    process.exit(this.summary.failed === 0 ? 0 : 1);
  }
}

// safeJSON is JSON.stringify that copes with BigInt and Error values.
function safeJSON(v, indent) {
  return JSON.stringify(
    v,
    (k, x) => {
      if (typeof x === 'bigint') return x.toString();
      if (x instanceof Error) return { name: x.name, message: x.message, code: x.code };
      return x;
    },
    indent,
  );
}

// errInfo reduces a thrown error, or a JSON-RPC error object, to what the
// checks compare and the summary shows.
function errInfo(e) {
  if (e === null || e === undefined) return { message: String(e) };
  return { name: e.name, code: e.code, message: e.message, reason: e.reason };
}

// hexQuantity returns the number a JSON-RPC quantity ("0x2a") stands for,
// or NaN when s is not one.
function hexQuantity(s) {
  return typeof s === 'string' && /^0x(0|[1-9a-f][0-9a-f]*)$/.test(s) ? Number.parseInt(s, 16) : NaN;
}

// run calls main(checks) and finishes; an exception that escapes main is a
// failure of its own (the summary says which).
function run(script, args, main) {
  const checks = new Checks(script, args);
  // Whatever a library leaves pending, the script ends: with a summary on
  // time, or killed by the Go test's context.
  Promise.resolve()
    .then(() => main(checks))
    .catch((e) => checks.fail('script threw', errInfo(e)))
    .finally(() => checks.finish());
}

module.exports = { parseArgs, Checks, errInfo, hexQuantity, run, safeJSON };
