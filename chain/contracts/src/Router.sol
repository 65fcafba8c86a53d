// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

interface IERC20Router {
    function transfer(address to, uint256 value) external returns (bool);
    function transferFrom(address from, address to, uint256 value) external returns (bool);
    function transferWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external;
}

/// @title Router
/// @notice Stands in for a swap or payment router: the payer's tokens first
/// come into the router, then the router pays them out. The merchant's
/// Transfer log is therefore FROM THE ROUTER, not from the customer.
contract Router {
    error TransferFailed();

    /// @notice Takes value from the caller with transferFrom (the caller has
    /// approved the router) and transfers it on to `to`.
    function route(address token, address to, uint256 value) external {
        if (!IERC20Router(token).transferFrom(msg.sender, address(this), value)) revert TransferFailed();
        if (!IERC20Router(token).transfer(to, value)) revert TransferFailed();
    }

    /// @notice Takes value from `from` with its EIP-3009 TransferWithAuthorization
    /// made out to this router (to = the router), then transfers it on to `to`.
    /// The receipt holds AuthorizationUsed(from, nonce), Transfer(from -> router)
    /// and Transfer(router -> to), in that order: the authorization's nonce is
    /// there, but the Transfer that follows it does not pay `to`.
    function routeWithAuthorization(
        address token,
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes calldata signature
    ) external {
        IERC20Router(token).transferWithAuthorization(from, address(this), value, validAfter, validBefore, nonce, signature);
        if (!IERC20Router(token).transfer(to, value)) revert TransferFailed();
    }
}
