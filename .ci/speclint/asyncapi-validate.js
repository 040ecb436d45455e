// Validates an AsyncAPI document with @asyncapi/parser, the parser the
// AsyncAPI CLI's `validate` runs (with its Spectral ruleset): references
// resolved (the JSON Schemas of docs/schemas included), every schema
// checked against its format. Exit 1 on any error-severity diagnostic.
// Usage: node asyncapi-validate.js <file>
'use strict';
const fs = require('fs');
const path = require('path');
const { Parser, fromFile } = require('@asyncapi/parser');

async function main() {
  const file = path.resolve(process.argv[2]);
  const parser = new Parser();
  const { document, diagnostics } = await fromFile(parser, file).parse();
  // Spectral severities: 0 error, 1 warning, 2 information, 3 hint.
  const names = ['error', 'warning', 'information', 'hint'];
  let errors = 0;
  for (const d of diagnostics) {
    const where = (d.path || []).join('/');
    console.log(`${path.relative(process.cwd(), file)} ${names[d.severity]} ${d.code} at /${where}: ${d.message}`);
    if (d.severity === 0) errors++;
  }
  if (!document || errors > 0) {
    console.log(`${file}: ${errors} error(s): not a valid AsyncAPI document`);
    process.exit(1);
  }
  console.log(`${file}: valid AsyncAPI ${document.version()} (${document.channels().length} channels, ${document.messages().length} messages)`);
}
main().catch((e) => { console.error(e); process.exit(1); });
