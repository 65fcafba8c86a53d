// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

// Free functions shared by the contracts that check ECDSA signatures (they are
// compiled into each user; no library is deployed).

/// @notice The signature is not 65 bytes (r || s || v).
error InvalidSignatureLength(uint256 length);
/// @notice s is in the upper half of the curve order: a malleable signature.
error InvalidSignatureS(bytes32 s);
/// @notice v is neither 27 nor 28.
error InvalidSignatureV(uint8 v);

// Half the secp256k1 group order: an s above it has a twin (n - s, flipped v)
// that recovers the same address, so only the lower one is accepted (EIP-2).
uint256 constant SECP256K1_HALF_N = 0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0;

/// @notice Recovers the signer of digest from a 65-byte r || s || v signature,
/// as OpenZeppelin's ECDSA.recover does: reverts on a malformed or malleable
/// signature and returns address(0) when the precompile finds no signer.
function recoverSigner(bytes32 digest, bytes memory signature) pure returns (address) {
    if (signature.length != 65) revert InvalidSignatureLength(signature.length);
    bytes32 r;
    bytes32 s;
    uint8 v;
    assembly ("memory-safe") {
        r := mload(add(signature, 0x20))
        s := mload(add(signature, 0x40))
        v := byte(0, mload(add(signature, 0x60)))
    }
    if (uint256(s) > SECP256K1_HALF_N) revert InvalidSignatureS(s);
    if (v != 27 && v != 28) revert InvalidSignatureV(v);
    return ecrecover(digest, v, r, s);
}
