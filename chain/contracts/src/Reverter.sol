// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

interface IERC20Rev {
    function transferFrom(address from, address to, uint256 value) external returns (bool);
}

/// @title Reverter
/// @notice Makes a real USDC transfer and then reverts, so the transaction is
/// mined with status 0 and its Transfer log is discarded.
contract Reverter {
    error Refused();

    function payThenRevert(address token, address to, uint256 value) external {
        IERC20Rev(token).transferFrom(msg.sender, to, value);
        revert Refused();
    }
}
