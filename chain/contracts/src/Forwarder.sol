// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

interface IERC20Like {
    function transferFrom(address from, address to, uint256 value) external returns (bool);
}

/// @title Forwarder
/// @notice Pays through a contract instead of from an EOA, as a smart wallet or
/// payment router would: the customer approves the forwarder, which then moves
/// the tokens with transferFrom. The Transfer log comes from the token, its
/// `from` is the customer, and the transaction's `to` is this contract.
contract Forwarder {
    error TransferFailed();

    function forward(address token, address to, uint256 value) external {
        if (!IERC20Like(token).transferFrom(msg.sender, to, value)) revert TransferFailed();
    }
}
