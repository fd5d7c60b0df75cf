// SPDX-License-Identifier: MIT
// Entry point of headwise_header_tests: its other translation units, generated one per header,
// prove each header compiles on its own; linking them proves they define nothing twice.
int main() { return 0; }
