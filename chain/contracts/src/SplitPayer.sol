// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

interface IERC20Split {
    function transferFrom(address from, address to, uint256 value) external returns (bool);
}

/// @title SplitPayer
/// @notice Makes two transfers in one transaction: first to `to`, then second
/// to `secondTo` (which may equal `to`). A verifier must sum every transfer to
/// the merchant within the transaction.
contract SplitPayer {
    error TransferFailed();

    function payTwice(address token, address to, uint256 first, address secondTo, uint256 second) external {
        if (!IERC20Split(token).transferFrom(msg.sender, to, first)) revert TransferFailed();
        if (!IERC20Split(token).transferFrom(msg.sender, secondTo, second)) revert TransferFailed();
    }
}
