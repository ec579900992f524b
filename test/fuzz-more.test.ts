import { fuzzSuite } from './support/fuzz-suite.js';

/**
 * Bad input (E1–E4, P13), second half of the generated requests, against another shim: a file of
 * its own so that it runs beside test/fuzz.test.ts.
 */
fuzzSuite(2, 2);
