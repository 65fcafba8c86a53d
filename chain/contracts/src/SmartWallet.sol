// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {recoverSigner} from "./ECDSA.sol";

/// @title SmartWallet
/// @notice A contract wallet owned by one EOA, as Safe or Coinbase Smart Wallet
/// are in miniature. It holds tokens, signs through EIP-1271 (a signature is
/// its own when the owner's ECDSA signature over the very hash recovers to the
/// owner) and moves funds with execute, which only the owner may call.
contract SmartWallet {
    bytes4 private constant ERC1271_MAGIC_VALUE = 0x1626ba7e;
    bytes4 private constant ERC1271_INVALID = 0xffffffff;

    address public immutable owner;

    error NotOwner();
    error CallFailed(bytes reason);

    constructor(address owner_) {
        owner = owner_;
    }

    /// @notice EIP-1271: the magic value when signature is the owner's over hash.
    function isValidSignature(bytes32 hash, bytes memory signature) external view returns (bytes4) {
        if (signature.length == 65 && recoverSigner(hash, signature) == owner) return ERC1271_MAGIC_VALUE;
        return ERC1271_INVALID;
    }

    /// @notice Calls `to` with `data` as the wallet (e.g. a token transfer).
    function execute(address to, bytes calldata data) external returns (bytes memory) {
        if (msg.sender != owner) revert NotOwner();
        (bool ok, bytes memory result) = to.call(data);
        if (!ok) revert CallFailed(result);
        return result;
    }
}
