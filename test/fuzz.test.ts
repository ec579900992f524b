import { fuzzSuite } from './support/fuzz-suite.js';

/**
 * Bad input (E1–E4, P13), first half: generated requests and the hand-written odd cases against a
 * shim of this file's own (test/support/fuzz-suite.ts says what is sent and what is checked).
 */
fuzzSuite(1, 2);
