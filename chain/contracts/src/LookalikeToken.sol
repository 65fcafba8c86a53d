// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title LookalikeToken
/// @notice A scam token that calls itself USDC, has 6 decimals and emits the
/// standard ERC-20 Transfer event without holding any real value: transfer
/// mints out of thin air. A verifier must ignore its logs because they are not
/// emitted by the network's canonical USDC contract.
contract LookalikeToken {
    string public constant name = "USD Coin";
    string public constant symbol = "USDC";
    uint8 public constant decimals = 6;

    mapping(address => uint256) public balanceOf;

    event Transfer(address indexed from, address indexed to, uint256 value);

    function transfer(address to, uint256 value) external returns (bool) {
        balanceOf[to] += value;
        emit Transfer(msg.sender, to, value);
        return true;
    }
}
